"""Generators of bad and oversized inputs, written on demand (never committed as files)."""
