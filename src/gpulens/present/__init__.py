"""Front ends: CLI, terminal, web, exporter, reports. They render view models, compute nothing."""
