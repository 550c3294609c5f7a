"""Scan: select processes, read them in stages under a budget, publish an immutable Snapshot."""
