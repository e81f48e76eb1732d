"""Sources of readings: each is fetch (I/O) plus parse (pure), behind the Collector protocol."""
