"""Family construction from the metric contract in metrics_spec."""

from __future__ import annotations

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)

from numa_exporter.metrics_spec import MetricSpec, by_name

_SPECS = by_name()


def spec(name: str) -> MetricSpec:
    """Return the contract entry of a metric; KeyError for names outside the contract."""
    return _SPECS[name]


Family = GaugeMetricFamily | CounterMetricFamily


def family(name: str) -> Family:
    """Return an empty gauge or counter family of the contract, labelled as it says.

    Info entries become gauges named ``*_info`` with value 1, as the text format has it.
    """
    s = spec(name)
    if s.type == "counter":
        return CounterMetricFamily(s.family_name, s.help, labels=list(s.labels))
    if s.type == "histogram":
        raise TypeError(f"{name} is a histogram: use histogram()")
    return GaugeMetricFamily(s.name, s.help, labels=list(s.labels))


def histogram(name: str) -> HistogramMetricFamily:
    """Return an empty histogram family of the contract."""
    s = spec(name)
    if s.type != "histogram":
        raise TypeError(f"{name} is not a histogram")
    return HistogramMetricFamily(s.family_name, s.help, labels=list(s.labels))


def pattern_family(pattern: str, field: str, labels: tuple[str, ...]) -> Family:
    """Return a family whose name fills ``<field>`` of a pattern entry of the contract."""
    s = spec(pattern)
    name = s.name.replace("<field>", field)
    help_ = s.help.replace("<field>", field)
    if s.type == "counter":
        return CounterMetricFamily(name.removesuffix("_total"), help_, labels=list(labels))
    return GaugeMetricFamily(name, help_, labels=list(labels))


__all__ = ["Family", "InfoMetricFamily", "family", "histogram", "pattern_family", "spec"]
