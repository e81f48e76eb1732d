"""gpulens.store."""
