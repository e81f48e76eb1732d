"""gpulens.analyze."""
