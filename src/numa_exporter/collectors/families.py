"""Family construction from a collector's metric specs."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from numa_exporter.collectors.spec import MetricSpec

Family = GaugeMetricFamily | CounterMetricFamily


def family(s: MetricSpec) -> Family:
    """Return an empty gauge or counter family of the spec, labelled as it says.

    Info entries become gauges named ``*_info`` with value 1, as the text format has it.
    Raises TypeError for histograms and pattern entries (see ``pattern_family``).
    """
    if s.pattern:
        raise TypeError(f"{s.name} is a pattern: use pattern_family()")
    if s.type == "histogram":
        raise TypeError(f"{s.name} is a histogram: it comes from a prometheus-client Histogram")
    if s.type == "counter":
        return CounterMetricFamily(s.family_name, s.help, labels=list(s.labels))
    return GaugeMetricFamily(s.name, s.help, labels=list(s.labels))


def pattern_family(s: MetricSpec, field: str) -> Family:
    """Return the family whose name and help fill ``<field>`` of a pattern spec with ``field``."""
    if not s.pattern:
        raise TypeError(f"{s.name} is not a pattern: use family()")
    name = s.name.replace("<field>", field)
    help_ = s.help.replace("<field>", field)
    if s.type == "counter":
        return CounterMetricFamily(name.removesuffix("_total"), help_, labels=list(s.labels))
    return GaugeMetricFamily(name, help_, labels=list(s.labels))


__all__ = ["Family", "family", "pattern_family"]
