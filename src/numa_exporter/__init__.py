"""numa-exporter: per-process NUMA memory placement for Prometheus."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("numa-exporter")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
