"""Structure of deploy/grafana/numa-exporter.json: importable, parameterised, spec metrics only."""

from __future__ import annotations

import re

from .helpers import (
    RECORDING,
    dashboard,
    known_series_name,
    metric_names,
    panel_targets,
    panels,
    rules,
    substitute,
)

DS_REF = {"type": "prometheus", "uid": "${datasource}"}
BUILTIN_VARS = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}


def test_dashboard_top_level_schema() -> None:
    d = dashboard()
    assert 36 <= d["schemaVersion"] <= 41
    assert d["uid"] == "numa-exporter" and d["title"]
    assert d["id"] is None, "an exported dashboard carries id null so that import creates it"
    assert isinstance(d["panels"], list) and d["panels"]
    assert d["time"]["from"].startswith("now-")


def test_template_variables() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert set(variables) == {"datasource", "instance", "process", "namespace", "pod"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    inst, proc = variables["instance"], variables["process"]
    assert inst["definition"] == "label_values(numa_process_remote_memory_ratio, instance)"
    assert proc["definition"] == (
        'label_values(numa_process_info{instance=~"$instance"}, comm)')
    for v in (inst, proc):
        assert v["type"] == "query" and v["datasource"] == DS_REF
        assert v["query"]["query"] == v["definition"]
        assert v["multi"] and v["includeAll"]
        assert v["current"] == {}, "no instance or process may be pre-selected"


def test_pod_variables_come_from_the_kubernetes_info_family() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    ns, pod = variables["namespace"], variables["pod"]
    assert ns["definition"] == (
        'label_values(numa_process_kubernetes_info{instance=~"$instance"}, namespace)')
    assert pod["definition"] == ('label_values(numa_process_kubernetes_info{instance=~"$instance",'
                                 ' namespace=~"$namespace"}, pod)')
    for v in (ns, pod):
        assert v["type"] == "query" and v["datasource"] == DS_REF
        assert v["query"]["query"] == v["definition"]
        assert v["multi"] and v["includeAll"] and v["current"] == {}
        # "All" must match an empty namespace/pod: a pod no file on the node names
        assert v["allValue"] == ".*"


def test_every_panel_uses_the_datasource_variable() -> None:
    d = dashboard()
    for p in panels(d):
        if p["type"] == "row":
            continue
        assert p["datasource"] == DS_REF, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS_REF, (p["title"], t["refId"])
    # no "__inputs" placeholder and no datasource uid other than the variable
    text = str(d)
    assert "DS_PROMETHEUS" not in text
    uids = set(re.findall(r"'uid': '([^']*)'", text)) - {"numa-exporter", "-- Grafana --"}
    assert uids == {"${datasource}"}, uids


def test_panel_ids_unique_and_layout_sane() -> None:
    ps = panels(dashboard())
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for p in ps:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
    for p in ps:
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]


def test_no_two_panels_overlap() -> None:
    """Grafana stacks overlapping panels on load, so a row placed on top of another row's
    panels moves them below it in an order nobody chose (the DAMON row once sat on y=165,
    over the Kubernetes row's panels)."""
    cells: dict[tuple[int, int], str] = {}
    for p in panels(dashboard()):
        g = p["gridPos"]
        for y in range(g["y"], g["y"] + g["h"]):
            for x in range(g["x"], g["x"] + g["w"]):
                other = cells.setdefault((x, y), p["title"])
                assert other == p["title"], f"{p['title']!r} overlaps {other!r} at x={x} y={y}"


def test_every_expression_is_filtered_by_instance_and_nothing_is_hard_coded() -> None:
    for p, t in panel_targets(dashboard()):
        expr = t["expr"]
        where = f"{p['title']} / {t['refId']}"
        assert 'instance=~"$instance"' in expr, where
        # every selector of a series carries the instance matcher
        for sel in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*\{([^}]*)\}", expr):
            assert 'instance=~"$instance"' in sel, f"{where}: {{{sel}}}"
        for m in re.finditer(r'\binstance\s*(=~|=|!=|!~)\s*"([^"]*)"', expr):
            assert m.group(2) == "$instance", f"{where}: hard-coded {m.group(0)}"
        assert not re.search(r"\d+\.\d+\.\d+\.\d+|localhost|:\d{4,5}\b", expr), where


# Panels about the exporter itself look at every process it read, whatever $process says.
NOT_PER_PROCESS = {"Slowest processes to read"}


JOIN = ('* on (instance, job, pid) group_left (comm) '
        'numa_process_info{instance=~"$instance", comm=~"$process"}')


def _unfiltered(expr: str) -> tuple[list[str], int]:
    """Return what in ``expr`` escapes $process, and how many per-process selectors it has.

    Per-process series carry pid only: each per-process query joins comm back from
    numa_process_info, the one selector filtered by $process; no other selector names comm.
    """
    sels = [(name, sel) for name, sel in re.findall(
                r"(?<![\w:])(numa_process_\w+|process:[\w:]+)\{([^}]*)\}", expr)
            if name != "numa_process_kubernetes_info"]  # no comm label: filtered by pod
    bad: list[str] = []
    found = 0
    if sels and JOIN not in expr:
        bad.append("not joined to numa_process_info filtered by $process")
    for name, sel in sels:
        if name == "numa_process_info":
            if 'comm=~"$process"' not in sel:
                bad.append(f"{name}{{{sel}}}")
        else:
            found += 1
            if "comm" in sel:
                bad.append(f"{name}{{{sel}}}: comm is on numa_process_info only")
    return bad, found


def test_process_panels_filter_by_process() -> None:
    checked = 0
    for p, t in panel_targets(dashboard()):
        if p["title"] in NOT_PER_PROCESS:
            continue
        bad, found = _unfiltered(t["expr"])
        assert not bad, f"{p['title']}: {bad}"
        checked += found
    assert checked >= 10


def test_process_filter_rule_catches_what_escapes_it() -> None:
    assert _unfiltered('numa_process_fault_remote_ratio{instance=~"$instance"}')[0]
    assert _unfiltered(
        'numa_process_remote_memory_ratio{instance=~"$instance", comm=~"$process"}')[0]
    assert _unfiltered(
        'numa_process_fault_remote_ratio{instance=~"$instance"} and on (instance, job, pid) '
        'numa_process_start_time_seconds{instance=~"$instance", comm=~"$process"}')[0]
    assert not _unfiltered(
        'numa_process_fault_remote_ratio{instance=~"$instance"} ' + JOIN)[0]


def test_pod_panels_filter_by_namespace_and_pod() -> None:
    checked = 0
    for p, t in panel_targets(dashboard()):
        for sel in re.findall(r"(?<![\w:])(?:numa_process_kubernetes_info|"
                              r"numa_kubernetes_\w+)\{([^}]*)\}", t["expr"]):
            assert 'namespace=~"$namespace"' in sel and 'pod=~"$pod"' in sel, p["title"]
            checked += 1
    assert checked >= 4


def test_expressions_use_known_metrics_and_variables() -> None:
    recorded = {r["record"] for r in rules(RECORDING)}
    used_recorded: set[str] = set()
    for p, t in panel_targets(dashboard()):
        expr = t["expr"]
        variables = set(re.findall(r"\$\{?(\w+)", expr))
        assert variables <= {"instance", "process", "namespace", "pod", *BUILTIN_VARS}, (
            p["title"], variables)
        plain = substitute(expr, {"instance": ".+", "process": ".+", "namespace": ".*",
                                  "pod": ".*", "__rate_interval": "1m"})
        names = metric_names(plain)
        assert names, p["title"]
        unknown = sorted(n for n in names if not known_series_name(n))
        assert not unknown, f"{p['title']}: {unknown}"
        used_recorded |= names & recorded
    # the dashboard is why the recording rules exist
    assert used_recorded, "no panel uses a recording rule"


def test_dashboard_covers_the_required_views() -> None:
    exprs = " ".join(t["expr"] for _, t in panel_targets(dashboard()))
    for needed in ("numa_process_remote_memory_ratio", "numa_process_memory_bytes",
                   "numa_process_remote_memory_ratio_change", "numa_process_pages_migrated",
                   "numa_vmstat_pgmigrate_success", "numa_node_miss", "numa_node_foreign",
                   "numa_balancing_mode", "numa_process_accelerator_info", "numa_accelerator_info",
                   "numa_exporter_scan_duration_seconds", "numa_exporter_parse_errors_total",
                   "numa_exporter_scan_stage_seconds", "numa_process_read_cpu_seconds",
                   "numa_process_placement_hold_seconds",
                   "numa_vmstat_numa_hint_faults_local_total", "numa_process_fault_remote_ratio",
                   'accessor="cpu"', "numa_process_tier_memory_bytes",
                   "numa_node_vmstat_pgpromote_success_total", "numa_node_memory_tier",
                   "numa_node_access_latency_seconds",
                   'numa_exporter_processes{instance=~"$instance"}',
                   "numa_process_kubernetes_info", "numa_kubernetes_container_assigned_nodes_info",
                   "numa_kubelet_pod_dra_device_info", 'reason=~"kubelet_.+"',
                   "numa_node_reclaim_scanned_pages_total", "numa_cgroup_hot_memory_bytes",
                   "numa_cgroup_hot_remote_memory_ratio"):
        assert needed in exprs, needed


def test_substitute_replaces_every_form() -> None:
    got = substitute('a{instance=~"$instance",x="${process}",y="[[process]]"}[$__rate_interval]',
                     {"instance": "h:1", "process": "p", "__rate_interval": "15s"})
    assert got == 'a{instance=~"h:1",x="p",y="p"}[15s]'
