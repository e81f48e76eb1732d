"""gpulens: shows what GPUs really do, who wastes them, what it costs, and how to fix it."""

__version__ = "0.1.0"
