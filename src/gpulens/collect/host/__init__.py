"""Host CPU, memory, disk and network readings, and host-side counters of GPU processes."""
