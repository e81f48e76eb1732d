"""Sources of readings. Each source is fetch (I/O) plus parse (pure) behind the Collector protocol."""
