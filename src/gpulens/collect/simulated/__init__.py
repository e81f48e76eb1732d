"""gpulens.collect.simulated."""
