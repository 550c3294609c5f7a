"""The web layer's own counters, exported live with each scrape: what it refused and how
credentials were judged.

They change between scans (a flood can start and end within one scan interval), so they
are not in the scan's Snapshot: they join the live ``process_*``/``python_*`` families,
rendered per scrape, and ``--web.disable-exporter-metrics`` leaves them out with those, as
node_exporter's flag leaves out its ``promhttp_*`` handler metrics.

The counts themselves are kept where the work is refused (``auth_queue.QueueStats``, the
``Limit`` objects, the server's connection and bad-request counts, the handlers' auth
results); this module only names them and turns them into families. Every label value is
emitted from the start, at 0, so ``rate()`` sees the first refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Literal, get_args

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

Refusal = Literal["auth_client_limit", "auth_global_limit", "max_requests",
                  "uncached_render_limit", "bad_request", "connection_limit"]
AuthResult = Literal["ok", "wrong", "cached_ok", "cached_wrong", "missing"]
REFUSALS: tuple[Refusal, ...] = get_args(Refusal)
AUTH_RESULTS: tuple[AuthResult, ...] = get_args(AuthResult)

REFUSED = "numa_exporter_web_requests_refused"
REFUSED_HELP = (
    "Requests the web server refused without serving them, by reason: the credential-check "
    "limits per address (429) and in all (503), --web.max-requests and the name[]+gzip "
    "render limit (503), a malformed request (4xx), a connection closed unread (too many).")
AUTH = "numa_exporter_web_auth_checks"
AUTH_HELP = (
    "Requests whose basic-auth credentials were judged, by result: ok and wrong (bcrypt "
    "ran), cached_ok and cached_wrong (a remembered outcome), missing (no Basic credentials).")

LIVE_COUNTERS = (REFUSED, AUTH)  # the family names (samples end in _total)


def auth_counts() -> dict[str, int]:
    """Return a zero count for every auth result."""
    return dict.fromkeys(AUTH_RESULTS, 0)


class WebCounters(Collector):
    """Yields the web layer's counter families from the counts ``refused()`` and ``auth()``
    return (read at each scrape; the event loop's thread updates them)."""

    def __init__(self, refused: Callable[[], Mapping[str, int]],
                 auth: Callable[[], Mapping[str, int]]) -> None:
        self.refused = refused
        self.auth = auth

    def collect(self) -> Iterator[Metric]:
        """Yield the refused-requests and the auth-checks counter families."""
        families: tuple[tuple[str, str, str, tuple[str, ...], Mapping[str, int]], ...] = (
            (REFUSED, REFUSED_HELP, "reason", REFUSALS, self.refused()),
            (AUTH, AUTH_HELP, "result", AUTH_RESULTS, self.auth()))
        for name, help_, label, keys, counts in families:
            fam = CounterMetricFamily(name, help_, labels=[label])
            for key in keys:
                fam.add_metric([key], counts.get(key, 0))
            yield fam


class Joined(Collector):
    """Yields the families of several collectors, in order (None ones skipped)."""

    def __init__(self, *collectors: Collector | None) -> None:
        self.collectors = [c for c in collectors if c is not None]

    def collect(self) -> Iterator[Metric]:
        """Yield every collector's families."""
        for c in self.collectors:
            yield from c.collect()
