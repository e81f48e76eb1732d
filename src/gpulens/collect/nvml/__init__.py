"""NVML: the binding protocol, the pure parse of what it returns, and the collector."""
