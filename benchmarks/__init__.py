"""Benchmarks of numa-exporter against the raw kernel read and ``numastat -p`` (not tests)."""
