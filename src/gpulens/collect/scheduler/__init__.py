"""Scheduler state: Slurm JSON, Kubernetes pods, job logs and cluster sequences.

Every reader is fetch (a file or a command's output) + parse (pure, on bytes or decoded
objects) and yields the tables of `gpulens.cluster_schema`: jobs, nodes, or the per-step
cluster sequence.
"""
