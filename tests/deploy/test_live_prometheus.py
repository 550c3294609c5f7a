"""A real Prometheus scraping real exporters: every dashboard query and rule expression runs.

Five exporters are started (scan interval 1s): on the two_node fixture root, on the
inference fixture root (accelerators from its udev records), on the kubernetes fixture root
(its host files under --path.rootfs), on the grace_hopper root (hinting faults, CPU-less and
generic-initiator nodes, HMAT, the GPU's memory node from its config.toml) and on this
machine's /proc. Next to them, a static
kube-state-metrics-shaped exposition (kube_pod_info, kube_pod_container_info of the kubernetes
root's pods) is served over HTTP. Prometheus (Debian's binary, own config and storage,
loopback ports, scrape and rule evaluation every 1s) scrapes them all and loads the three
rule files. Then:

* every rule is loaded, evaluated without error, and its expression parses via the API;
* every dashboard query, with the Grafana variables substituted, parses and returns data
  from at least one exporter - except the targets in PARSE_ONLY, whose metrics no exporter
  here can produce (listed with the reason);
* the template variables' label_values queries find the exporters and their processes;
* alerts that the inference fixture's bindings must trigger are pending;
* on the kubernetes root: the kubelet alerts are pending with the pod's namespace, pod and
  container, the fleet recording rules hold the pod names, and docs/deploy.md's join with
  kube-state-metrics returns the pods with their node and owner.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import (
    FIXTURE_ROOTS,
    KUBERNETES_RULES,
    RECORDING,
    REPO,
    RULES,
    dashboard,
    exporter_available,
    exporter_command,
    free_port,
    http_get,
    missing,
    panel_targets,
    require_tool,
    rules,
    running,
    substitute,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e]

RATE_INTERVAL = "10s"  # what $__rate_interval would be at a 1s scrape interval, with margin
RULE_FILES = (RULES, RECORDING, KUBERNETES_RULES)
# Grafana's "All" for the dashboard's variables (namespace and pod: ".*", an empty name too)
ALL = {"process": ".+", "namespace": ".*", "pod": ".*", "__rate_interval": RATE_INTERVAL}

# kube-state-metrics' view of the kubernetes root's pods, labels as it writes them (v2.x):
# the node name and owners come only from here; kube-proxy's container name too (no runtime
# spec on the node names it).
A, B, C = ("513cb897-0262-4868-826f-aa943ee45a38", "94283d1b-ce5a-4797-bff8-0cf0c7143b2b",
           "0f6c2d9e-8b41-4a57-9d3c-5e7f1a2b4c6d")
KSM_PODS = (  # uid, namespace, pod, owner kind, owner, container, container id
    (A, "default", "gpu-infer-0", "StatefulSet", "gpu-infer", "app", "c0a1" * 16),
    (B, "ml", "trainer-7d9f5c-x2k4q", "ReplicaSet", "trainer-7d9f5c", "app", "c0b2" * 16),
    (C, "kube-system", "kube-proxy-x7k2p", "DaemonSet", "kube-proxy", "kube-proxy",
     "c0c3" * 16),
)
KSM_EXPOSITION = "".join(
    f'kube_pod_info{{namespace="{ns}",pod="{pod}",uid="{uid}",host_ip="10.0.0.7",'
    f'pod_ip="10.244.1.{i}",node="gpu-node-7",created_by_kind="{kind}",'
    f'created_by_name="{owner}",priority_class="",host_network="false"}} 1\n'
    f'kube_pod_container_info{{namespace="{ns}",pod="{pod}",uid="{uid}",'
    f'container="{cont}",image="registry.example/{cont}:1",image_spec="registry.example/'
    f'{cont}:1",image_id="",container_id="containerd://{cid}"}} 1\n'
    for i, (uid, ns, pod, kind, owner, cont, cid) in enumerate(KSM_PODS))

# (panel title, refId) -> why no exporter here has data for it. Parse-only.
PARSE_ONLY = {
    ("DRA devices of pods and their NUMA nodes", "A"):
        "numa_kubelet_pod_dra_device_info needs a dra_manager_state: the kubernetes root has "
        "device-plugin GPUs only (the kubernetes_dra root, whose pods share its names, would "
        "merge into the fleet rules' pods); the family is checked on that root in "
        "tests/collectors/test_kubernetes_dra_root.py",
    ("Node reclaim pressure vs allocations pushed remote", "A"):
        "numa_node_reclaim_scanned_pages_total: node<N>/vmstat has pgscan_* from Linux 7.1 "
        "only (the 7.3 captures); the fixture roots here are older kernels'",
    ("Bytes arriving / leaving per node", "A"):
        "numa_process_node_arrived_bytes_total needs pages to migrate between nodes between "
        "scans: the fixture roots are static and growth is not movement",
    ("Bytes arriving / leaving per node", "B"):
        "numa_process_node_departed_bytes_total: as above",
    ("Sampling error of the remote ratio", "A"):
        "numa_process_remote_memory_ratio_stderr > 0: only sampled placement reads have it",
    ("Resident bytes per node and kind", "B"):
        "numa_process_memory_bytes_stderr > 0: only sampled placement reads have it",
    ("Sampling error of the remote ratio", "C"):
        "numa_process_placement_info{method=\"sampled\"}: only sampled placement reads have it",
    ("Sampling error of the remote ratio", "B"):
        "numa_process_placement_sampled_pages: only sampled placement reads have it",
    ("Estimated mmap-lock hold, and bytes the sample could not place", "B"):
        "numa_process_placement_unsampled_bytes > 0: only a sampled read that could not place "
        "every resident byte has it (a sparse reservation on a kernel without PAGEMAP_SCAN)",
    ("Hot vs all remote bytes", "B"):
        "numa_process_hot_memory_bytes: only --collector.damon on a kernel with DAMON_VADDR "
        "has it (the 6.12 guest; this host's DAMON belongs to its own reclaim)",
    ("Hot remote ratio", "A"):
        "numa_process_hot_remote_memory_ratio: as above",
    ("Hot remote ratio", "B"):
        "numa_process_hot_remote_memory_ratio: as above",
    ("Hot and idle memory by node, host-wide", "A"):
        "numa_node_hot_memory_bytes: only --collector.damon in paddr mode has it (the 6.12 "
        "guest's test_damon_guest; this host's DAMON belongs to its own reclaim)",
    ("Hot and idle memory by node, host-wide", "B"):
        "numa_node_idle_memory_bytes: as above",
    ("Hot memory per pod and node", "A"):
        "numa_cgroup_hot_memory_bytes: only --collector.damon.cgroups on a kernel with DAMON's "
        "per-filter passed bytes (6.14+: the 7.3 guest's test_damon_cgroups_guest)",
    ("Hot memory per pod and node", "B"):
        "numa_cgroup_hot_memory_bytes: as above",
    ("Hot remote ratio per pod", "A"):
        "numa_cgroup_hot_remote_memory_ratio: as above",
    ("Hot remote ratio per pod", "B"):
        "numa_cgroup_hot_remote_memory_ratio: as above",
}


@dataclass
class Stack:
    prom: str                                   # http://127.0.0.1:port
    ksm: str = ""                               # the kube-state-metrics-shaped target
    instances: dict[str, str] = field(default_factory=dict)  # name -> instance label
    logs: dict[str, Path] = field(default_factory=dict)

    def api(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.prom}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        status, body = http_get(url, timeout=10)
        assert status in (200, 400, 422), f"{url}: HTTP {status} {body[:300]!r}"
        doc = json.loads(body)
        assert isinstance(doc, dict)
        return doc

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("query", query=expr)

    def query_range(self, expr: str, seconds: int = 20) -> dict[str, Any]:
        end = time.time()
        return self.api("query_range", query=expr, start=f"{end - seconds:.3f}",
                        end=f"{end:.3f}", step="1")


def _exporters() -> dict[str, list[str]]:
    two, inf = FIXTURE_ROOTS / "two_node", FIXTURE_ROOTS / "inference"
    kube = FIXTURE_ROOTS / "kubernetes"
    gh = FIXTURE_ROOTS / "grace_hopper"
    for root in (two, inf, kube, gh):
        if not (root / "proc").is_dir() or not (root / "sys").is_dir():
            missing(f"fixture root {root}")
    records = inf / "udev.json"
    if not records.is_file():
        missing(f"accelerator records {records}")
    return {
        "two_node": [f"--path.procfs={two / 'proc'}", f"--path.sysfs={two / 'sys'}"],
        "inference": [f"--path.procfs={inf / 'proc'}", f"--path.sysfs={inf / 'sys'}",
                      f"--accelerator.records={records}"],
        "kubernetes": [f"--path.procfs={kube / 'proc'}", f"--path.sysfs={kube / 'sys'}",
                       f"--path.rootfs={kube / 'rootfs'}", "--process.min-resident=0"],
        "grace_hopper": [f"--path.procfs={gh / 'proc'}", f"--path.sysfs={gh / 'sys'}",
                         f"--accelerator.records={gh / 'udev.json'}",
                         f"--config.file={gh / 'config.toml'}"],
        "real": ["--process.min-resident=0"],
    }


class _Static(http.server.BaseHTTPRequestHandler):
    body = KSM_EXPOSITION.encode()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _kube_state_metrics() -> Iterator[str]:
    """Serve KSM_EXPOSITION on a loopback port; yield its host:port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Static)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _wait(what: str, check: Any, stack: Stack, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-2000:]}"
                     for n, p in stack.logs.items())
    pytest.fail(f"timed out waiting for {what}: {last}\n{logs}", pytrace=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    if not exporter_available():
        missing("the numa-exporter command (pip install -e .)")
    exporters = _exporters()
    tmp = tmp_path_factory.mktemp("live")
    with ExitStack() as es:
        s = Stack(prom="")
        targets = []
        for name, args in exporters.items():
            port = free_port()
            log = tmp / f"exporter-{name}.log"
            s.logs[f"exporter {name}"] = log
            cmd = [*exporter_command(), f"--web.listen-address=127.0.0.1:{port}",
                   "--scan.interval=1s", "--log.format=json", *args]
            es.enter_context(running(cmd, log, f"http://127.0.0.1:{port}/metrics",
                                     what=f"exporter on {name}",
                                     ready_body=b"numa_exporter_scans_total 1"))
            s.instances[name] = f"127.0.0.1:{port}"
            targets.append({"targets": [f"127.0.0.1:{port}"], "labels": {"root": name}})
        ksm = es.enter_context(_kube_state_metrics())
        s.ksm = ksm
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in RULE_FILES],
            "scrape_configs": [
                {"job_name": "numa-exporter", "static_configs": targets},
                # as kube-state-metrics is scraped: its namespace/pod labels are its own
                {"job_name": "kube-state-metrics", "honor_labels": True,
                 "static_configs": [{"targets": [ksm]}]},
            ],
        }
        cfg = tmp / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        port = free_port()
        s.prom = f"http://127.0.0.1:{port}"
        log = tmp / "prometheus.log"
        s.logs["prometheus"] = log
        es.enter_context(running(
            [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
             "--log.level=warn"],
            log, f"{s.prom}/-/ready", what="prometheus", timeout=60))

        def scraped() -> bool | str:
            r = s.query("count_over_time(numa_exporter_scans_total[1m]) >= 6")
            got = {x["metric"]["instance"] for x in r["data"]["result"]}
            return True if got == set(s.instances.values()) else f"scraped enough: {got}"

        def rules_ran() -> bool | str:
            groups = s.api("rules")["data"]["groups"]
            pending = [r["name"] for g in groups for r in g["rules"]
                       if r.get("lastEvaluation", "").startswith("0001")]
            return True if groups and not pending else f"not evaluated yet: {pending}"

        def recorded() -> bool | str:
            r = s.query("instance_node:numa_node_miss_pages:rate5m")
            return True if r["data"]["result"] else "no recorded series yet"

        _wait("six scrapes of every exporter", scraped, s)
        _wait("every rule to be evaluated", rules_ran, s)
        _wait("recording rules", recorded, s)
        yield s


def _escape(instance: str) -> str:
    """Return ``instance`` as a regex inside a PromQL string, as Grafana escapes it."""
    return re.escape(instance).replace("\\", "\\\\")


def test_rules_are_loaded_and_healthy(stack: Stack) -> None:
    groups = stack.api("rules")["data"]["groups"]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    want = {r.get("alert") or r["record"] for path in RULE_FILES for r in rules(path)}
    assert set(loaded) == want
    bad = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
    assert not bad, bad


def test_every_rule_expression_parses(stack: Stack) -> None:
    for path in RULE_FILES:
        for rule in rules(path):
            r = stack.query(rule["expr"])
            assert r["status"] == "success", (rule.get("alert") or rule["record"], r)


def test_recording_rules_have_data(stack: Stack) -> None:
    """Each recorded series exists for some exporter (the miss ratio only where pages are
    allocated: the fixture roots are static, so it comes from this host)."""
    for rule in rules(RECORDING):
        r = stack.query(rule["record"])
        got = {x["metric"].get("instance") for x in r["data"]["result"]}
        assert got & set(stack.instances.values()), f"{rule['record']} has no data"
    # the fleet view drops instance (a pod runs on one node): each has the fixture's pods
    for rule in (r for r in rules(KUBERNETES_RULES) if "record" in r):
        r = stack.query(rule["record"])
        got = {x["metric"].get("namespace") for x in r["data"]["result"]}
        assert got & {"default", "ml"}, f"{rule['record']} has no pod data"
    inst = stack.instances["two_node"]
    r = stack.query(f'instance_node:numa_node_miss_pages:rate5m{{instance="{inst}"}}')
    assert sorted(x["metric"]["node"] for x in r["data"]["result"]) == ["0", "1"]


def test_bindings_of_the_inference_fixture_make_alerts_pending(stack: Stack) -> None:
    """The fixture's vllm (pid 500) is bound away from its GPU with balancing on."""
    inst = stack.instances["inference"]

    def pending() -> bool | str:
        alerts = stack.api("alerts")["data"]["alerts"]
        got = {(a["labels"]["alertname"], a["labels"].get("pid")) for a in alerts
               if a["labels"].get("instance") == inst and a["state"] in ("pending", "firing")}
        want = {("NumaBalancingWithStrictBinding", "500"), ("NumaAcceleratorNodeMismatch", "500")}
        return True if want <= got else f"pending/firing: {sorted(got)}"

    _wait("alerts on the inference fixture", pending, stack, timeout=30)
    # and nothing fires for the exporter itself: it is up and scanning
    alerts = stack.api("alerts")["data"]["alerts"]
    names = {a["labels"]["alertname"] for a in alerts}
    assert not names & {"NumaExporterDown", "NumaExporterScanStale"}, names


def test_template_variables_find_instances_and_processes(stack: Stack) -> None:
    r = stack.api("label/instance/values", **{"match[]": "numa_process_remote_memory_ratio"})
    assert set(r["data"]) == set(stack.instances.values())
    for name, inst in stack.instances.items():
        sel = f'numa_process_info{{instance=~"{_escape(inst)}"}}'
        r = stack.api("label/comm/values", **{"match[]": sel})
        assert r["data"], f"no process for $process on {name}"


def test_pod_variables_find_the_pods(stack: Stack) -> None:
    inst = _escape(stack.instances["kubernetes"])
    r = stack.api("label/namespace/values",
                  **{"match[]": f'numa_process_kubernetes_info{{instance=~"{inst}"}}'})
    assert set(r["data"]) == {"default", "ml", "kube-system"}
    r = stack.api("label/pod/values", **{"match[]": (
        f'numa_process_kubernetes_info{{instance=~"{inst}", namespace=~"ml"}}')})
    assert r["data"] == ["trainer-7d9f5c-x2k4q"]


def test_kubelet_alerts_name_the_pod(stack: Stack) -> None:
    """The kubernetes root's trainer (pid 601) breaks all three of the kubelet's promises."""
    inst = stack.instances["kubernetes"]
    want = {("NumaKubeletMemoryNodesMismatch", "601", "ml", "trainer-7d9f5c-x2k4q", "app"),
            ("NumaKubeletCpuNodesMismatch", "601", "ml", "trainer-7d9f5c-x2k4q", "app"),
            ("NumaKubeletDeviceNodeMismatch", "601", "ml", "trainer-7d9f5c-x2k4q", "app")}

    def pending() -> bool | str:
        alerts = stack.api("alerts")["data"]["alerts"]
        got = {(a["labels"]["alertname"], a["labels"].get("pid"), a["labels"].get("namespace"),
                a["labels"].get("pod"), a["labels"].get("container")) for a in alerts
               if a["labels"].get("instance") == inst and a["state"] in ("pending", "firing")
               and a["labels"]["alertname"].startswith("NumaKubelet")}
        return True if got == want else f"pending/firing: {sorted(got)}"

    _wait("kubelet alerts on the kubernetes fixture", pending, stack, timeout=30)


def test_fleet_rules_carry_pod_names(stack: Stack) -> None:
    r = stack.query("pod:numa_process_remote_memory_ratio:bytes_weighted")
    got = {(x["metric"]["namespace"], x["metric"]["pod"]): float(x["value"][1])
           for x in r["data"]["result"]}
    # bytes from the kubernetes root's tables: trainer 2 GiB remote of 2.25 GiB, gpu-infer-0
    # 16 MiB of 528 MiB, kube-proxy all local (its home is its threads' node)
    assert got.keys() == {("ml", "trainer-7d9f5c-x2k4q"), ("default", "gpu-infer-0"),
                          ("kube-system", "kube-proxy-x7k2p")}
    assert got[("ml", "trainer-7d9f5c-x2k4q")] == pytest.approx(2048 / 2304)
    assert got[("default", "gpu-infer-0")] == pytest.approx(16 / 528)
    top = stack.query("pod:numa_process_remote_memory_bytes:topk10")["data"]["result"]
    assert max(top, key=lambda x: float(x["value"][1]))["metric"]["pod"] == (
        "trainer-7d9f5c-x2k4q")


def _documented_join() -> str:
    text = (REPO / "docs" / "deploy.md").read_text()
    block = text.split("<!-- ksm-join:begin -->", 1)[1].split("<!-- ksm-join:end -->", 1)[0]
    return block.split("```promql", 1)[1].split("```", 1)[0]


def test_join_with_kube_state_metrics_returns_the_pods(stack: Stack) -> None:
    """docs/deploy.md's query, on this exporter's series and kube-state-metrics' ones."""
    r = stack.query(_documented_join())
    assert r["status"] == "success", r
    got = {(x["metric"]["pid"], x["metric"]["namespace"], x["metric"]["pod"],
            x["metric"]["node"], x["metric"]["created_by_kind"])
           for x in r["data"]["result"]
           if x["metric"].get("instance") == stack.instances["kubernetes"]}
    assert got == {("600", "default", "gpu-infer-0", "gpu-node-7", "StatefulSet"),
                   ("601", "ml", "trainer-7d9f5c-x2k4q", "gpu-node-7", "ReplicaSet"),
                   ("603", "kube-system", "kube-proxy-x7k2p", "gpu-node-7", "DaemonSet")}
    # the container the node's files could not name, from kube-state-metrics by container_id
    r = stack.query('numa_process_kubernetes_info{pid="603"} * on (container_id) '
                    "group_left (image) kube_pod_container_info")
    (x,) = r["data"]["result"]
    assert x["metric"]["image"] == "registry.example/kube-proxy:1"


def _run_target(stack: Stack, target: dict[str, Any], instance: str) -> tuple[str, list[Any]]:
    expr = substitute(target["expr"], {"instance": instance, **ALL})
    r = stack.query(expr) if target.get("instant") else stack.query_range(expr)
    assert r["status"] == "success", f"{expr}: {r.get('error')}"
    return expr, r["data"]["result"]


def test_every_dashboard_query_parses_and_returns_data(
        stack: Stack, record_property: Any) -> None:
    targets = panel_targets(dashboard())
    assert {(p["title"], t["refId"]) for p, t in targets} >= set(PARSE_ONLY), "stale PARSE_ONLY"
    no_data: list[str] = []
    report: dict[str, list[str]] = {}
    for panel, target in targets:
        key = (panel["title"], target["refId"])
        _run_target(stack, target, ".+")  # "All" parses too
        with_data = [name for name, inst in stack.instances.items()
                     if _run_target(stack, target, _escape(inst))[1]]
        report[f"{key[0]} [{key[1]}]"] = with_data
        if key in PARSE_ONLY:
            fixtures = [n for n in with_data if n != "real"]
            assert not fixtures, f"{key} now has data on {fixtures}: remove it from PARSE_ONLY"
        elif not with_data:
            no_data.append(f"{key[0]} [{key[1]}]: {target['expr']}")
    record_property("panel_data", json.dumps(report))
    for k, v in report.items():
        print(f"{k}: {', '.join(v) or 'parse-only'}")
    assert not no_data, "queries without data:\n" + "\n".join(no_data)
