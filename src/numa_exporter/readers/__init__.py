"""Readers: where sources (bytes from a root) meet parsers (bytes to values)."""
