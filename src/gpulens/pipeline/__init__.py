"""gpulens.pipeline."""
