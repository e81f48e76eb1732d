"""dcgm-exporter source: scrape `/metrics` pages (scrape.py) and parse them (parse.py, pure)."""
