"""Cluster analysis: allocation per queue, pending-while-idle, fragmentation (pure)."""
