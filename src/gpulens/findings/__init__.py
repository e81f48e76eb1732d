"""gpulens.findings."""
