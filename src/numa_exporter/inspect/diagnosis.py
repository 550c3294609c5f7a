"""The diagnosis of one process, pure: a verdict, remedies, the report and its text.

``inspect/command.py`` reads the process and prints what this module returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from numa_exporter.inspect.tiers import render_tiers, tiers_report
from numa_exporter.model.binding import memory_binding, memory_capable
from numa_exporter.model.home import Home, locality
from numa_exporter.model.kubernetes import DraDevice, KubernetesView, kubelet_home
from numa_exporter.model.snapshot import ProcessSample, SystemSample
from numa_exporter.parsers.cpulist import format_cpulist
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.text import label_text

LISTED_THREADS = 32  # threads outside the binding listed by inspect (the rest counted)
REMOTE_BAD = 0.5
REMOTE_WARN = 0.1
BALANCING = {0: "off", 1: "normal", 2: "memory tiering", 3: "normal + memory tiering"}
MISMATCH_TEXT = {
    "memory_not_on_thread_nodes": "memory is bound to nodes where none of its threads run",
    "threads_bound_memory_free": "threads are bound but memory may land on any node",
    "accelerator_node_not_allowed": "the accelerator's node is outside the allowed memory nodes",
    "balancing_with_strict_binding": "numa_balancing is on while the process's memory is "
                                     "strictly bound, where balancing cannot move it",
    "memory_off_policy_nodes": "pages sit outside the nodes of the process's own bind policy "
                               "(moved by migratepages or mbind); new pages still go to the "
                               "policy's nodes",
    "threads_outside_binding": "some threads may run on CPUs outside the process's binding "
                               "(created before a late bind, they kept their old mask)",
    "kubelet_memory_nodes": "over 5% of its memory lies outside the NUMA nodes the kubelet's "
                            "Memory Manager assigned its container",
    "kubelet_cpu_nodes": "threads ran on a node none of the exclusive CPUs the kubelet's CPU "
                         "Manager assigned its container is on",
    "kubelet_device_node": "a device the kubelet assigned its container sits on a node "
                           "outside the container's assigned memory (or CPU) nodes",
    "kubelet_dra_device_node": "a device Dynamic Resource Allocation gave its pod sits on a "
                               "node outside the container's assigned memory (or CPU) "
                               "nodes",
}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The verdict on one process and the remedy lines to paste."""

    verdict: str  # local | remote | mixed | no-memory
    summary: str
    target_nodes: frozenset[int]
    problems: tuple[str, ...]
    remedies: tuple[str, ...]
    ratios: dict[str, float] = field(default_factory=dict)  # home source -> remote ratio


def candidate_homes(sample: ProcessSample, system: SystemSample) -> dict[str, frozenset[int]]:
    """Return every plausible home of the process by source (threads, affinity, ...)."""
    out: dict[str, frozenset[int]] = {}
    if sample.home.nodes:
        out[sample.home.source] = sample.home.nodes
    kubelet = kubelet_home(sample.kubelet)
    if kubelet:
        out.setdefault("kubelet", kubelet)
    accel = frozenset(u.node for u in sample.accelerators if u.node >= 0)
    if accel:
        out["accelerator"] = accel
    if sample.threads_by_node:
        out.setdefault("threads", frozenset(sample.threads_by_node))
    if sample.cpus_allowed:
        out.setdefault("affinity", system.topology.nodes_of_cpus(sample.cpus_allowed))
    return out


def accelerator_memory(sample: ProcessSample) -> frozenset[int]:
    """Return the memory nodes of the accelerators the process uses whose memory is a node
    (the ``accelerator`` accessor's home; empty without one): pages there are where the
    accelerator wants them, and no remedy moves them or binds memory away from them."""
    view = sample.tiers.accessor("accelerator") if sample.tiers is not None else None
    return view.home if view is not None else frozenset()


def tiers_text(sample: ProcessSample) -> str:
    """Return the summary's clause on far memory and the accelerator's view ("" if none)."""
    if sample.tiers is None:
        return ""
    out = ""
    cpu = sample.tiers.accessor("cpu")
    if cpu is not None and cpu.bytes.get("far", 0):
        out += f"; far, on CPU-less or slower-tier nodes: {cpu.ratio('far'):.0%}"
    accel = sample.tiers.accessor("accelerator")
    if accel is not None:
        out += (f"; {accel.ratio('local'):.0%} local to its accelerator's memory node(s) "
                f"{format_cpulist(set(accel.home))}")
    return out


def pod_text(sample: ProcessSample) -> str:
    """Return ``pod NS/NAME container C`` for a process in a pod container, else ``""``."""
    ref = sample.kubernetes
    if ref is None:
        return ""
    pod = f"{ref.namespace}/{ref.pod}" if ref.pod else f"uid {ref.uid}"
    return label_text(f"pod {pod}" + (f" container {ref.container}" if ref.container else ""))


def kubelet_policy_text(view: KubernetesView | None) -> str:
    """Return the kubelet's CPU and Memory Manager policies as its checkpoints name them."""
    if view is None or not (view.cpu_policy or view.memory_policy):
        return "kubelet checkpoints not read"
    return (f"cpuManagerPolicy {label_text(view.cpu_policy) or 'unknown'}, "
            f"memoryManagerPolicy {label_text(view.memory_policy) or 'unknown'}")


def diagnose(sample: ProcessSample, system: SystemSample, unit: str | None,
             view: KubernetesView | None = None) -> Diagnosis:
    """Return the verdict for a process, with remedies for its home: numactl and systemd,
    or for a process in a pod container, the kubelet's configuration (``view`` gives its
    policies)."""
    homes = candidate_homes(sample, system)
    node_bytes = sample.node_bytes()
    ratios = {src: locality(node_bytes, Home(n, src)).remote_ratio for src, n in homes.items()}
    total = sum(node_bytes.values())
    target = sample.home.nodes or frozenset(system.topology.cpu_nodes())
    ratio = sample.locality.remote_ratio
    problems = [MISMATCH_TEXT[r] for r, on in sample.mismatches.items() if on]
    if total == 0:
        verdict, summary = "no-memory", "no resident memory in numa_maps"
    elif ratio >= REMOTE_BAD:
        verdict = "remote"
        summary = (f"{ratio:.0%} of resident memory is remote to its home node(s) "
                   f"{format_cpulist(set(target))} (home from {sample.home.source})")
    elif ratio >= REMOTE_WARN:
        verdict = "mixed"
        summary = (f"{ratio:.0%} of resident memory is remote to node(s) "
                   f"{format_cpulist(set(target))}")
    else:
        verdict = "local"
        summary = (f"{1 - ratio:.0%} of resident memory is local to node(s) "
                   f"{format_cpulist(set(target))}")
    if total:
        summary += tiers_text(sample)
    pod = pod_text(sample)
    if pod:
        promise = ("assigned by the kubelet" if sample.kubelet is not None
                   else "no NUMA assignment by the kubelet")
        summary += f"; {pod}, {promise} ({kubelet_policy_text(view)})"
    remedies: list[str] = []
    if verdict in ("remote", "mixed") or problems:
        if sample.kubernetes is not None:
            remedies = _pod_remedies(sample, target, verdict, node_bytes, view)
        else:
            remedies = _remedies(sample, system, unit, target, verdict, node_bytes)
    return Diagnosis(verdict, summary, target, tuple(problems), tuple(remedies), ratios)


def _pod_remedies(sample: ProcessSample, target: frozenset[int], verdict: str,
                  node_bytes: dict[int, int], view: KubernetesView | None) -> list[str]:
    """Return the remedy lines for a process in a pod container: the kubelet decides its
    placement (numactl or a systemd drop-in would be undone by the next container start)."""
    out: list[str] = []
    pod = pod_text(sample)
    cpu_policy = view.cpu_policy if view is not None else ""
    mem_policy = view.memory_policy if view is not None else ""
    if sample.kubelet is None or sample.kubelet.memory_nodes is None:
        out.append(f"# {pod}: give it Guaranteed QoS with integer CPUs (every container's "
                   "requests = limits for cpu and memory, cpu a whole number), so the "
                   "kubelet assigns it exclusive CPUs and memory nodes")
    settings = []
    if cpu_policy != "static":
        settings.append("cpuManagerPolicy: static")
    if mem_policy != "Static":
        settings.append("memoryManagerPolicy: Static")
    settings.append("topologyManagerPolicy: single-numa-node")
    out.append("# kubelet configuration (KubeletConfiguration) of this node:\n"
               + "\n".join(settings)
               + "\n# changing a manager policy: drain the node, remove its state file "
                 "(cpu_manager_state, memory_manager_state) and restart the kubelet")
    escaped = _escaped_remedy(sample)
    if escaped:
        out.append(escaped + "; in a pod the kubelet's static CPU Manager policy (Guaranteed "
                   "QoS, integer CPUs) confines every thread of the container")
    if sample.mismatches.get("kubelet_cpu_nodes"):
        out.append("# threads ran outside the CPUs the CPU Manager assigned: the container's "
                   "cpuset.cpus does not hold the assignment (check the kubelet's log and "
                   "anything else that writes the pod's cgroups)")
    if sample.mismatches.get("kubelet_dra_device_node") and sample.kubelet is not None:
        local = sample.kubelet.memory_nodes or sample.kubelet.cpu_nodes or frozenset()
        for d in sample.kubelet.dra_off():
            out.append(_dra_remedy(d, local))
    remote_nodes = sorted(set(node_bytes) - target - accelerator_memory(sample))
    if verdict != "local" and remote_nodes:
        out.append(f"migratepages {sample.pid} {format_cpulist(set(remote_nodes))} "
                   f"{format_cpulist(set(target))}   # move existing pages now, from the "
                   "host (numactl package)")
    return out


def dra_name(d: DraDevice) -> str:
    """Return a DRA device as ``driver/pool/device (claim ns/name)``, label-safe."""
    name = "/".join(label_text(x) for x in (d.driver, d.pool, d.device) if x)
    claim = f"{d.claim_namespace}/{d.claim}" if d.claim_namespace else d.claim
    return f"{name} (claim {label_text(claim)})"


def _dra_remedy(d: DraDevice, local: frozenset[int]) -> str:
    """Return the remedy lines for a DRA device on a node outside the container's nodes."""
    paths = ", ".join(label_text(p) for p in d.paths)
    return (f"# DRA device {dra_name(d)}{f' [{paths}]' if paths else ''} is on node "
            f"{format_cpulist(set(d.nodes))}, the container's CPUs and memory on node "
            f"{format_cpulist(set(local))}: the Topology Manager does not align DRA devices."
            "\n# Allocate a device on the container's node: in the ResourceClaim (or its "
            "template) add a CEL selector on the NUMA node attribute the driver publishes, "
            "e.g.\n#   selectors: [{cel: {expression: 'device.attributes[\""
            f"{label_text(d.driver)}\"].numaNode == {min(local) if local else 0}'}}}}]"
            "\n# then recreate the pod; or, "
            "where the device must stay, recreate the pod until the kubelet assigns CPUs "
            f"and memory on node {format_cpulist(set(d.nodes))}")


def current_bindings(sample: ProcessSample, system: SystemSample
                     ) -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """Return (memory nodes, CPU nodes) the process is bound to now; None where unbound."""
    mem = memory_binding(sample.policy_nodes, sample.mems_allowed,
                         frozenset(system.topology.nodes), system.memory_nodes)
    cpu: frozenset[int] | None = None
    if sample.cpus_allowed:
        nodes = system.topology.nodes_of_cpus(sample.cpus_allowed)
        if nodes and nodes != system.topology.cpu_nodes():
            cpu = nodes
    return mem, cpu


def _remedies(sample: ProcessSample, system: SystemSample, unit: str | None,
              target: frozenset[int], verdict: str, node_bytes: dict[int, int]) -> list[str]:
    """Return the remedy lines that would change something for the process."""
    out: list[str] = []
    nodes_s = format_cpulist(set(target))
    mem_target = target | accelerator_memory(sample)  # memory may stay on the accelerator
    mem_s = format_cpulist(set(mem_target))
    mem_now, cpu_now = current_bindings(sample, system)
    cpus: frozenset[int] = frozenset()
    for n in target:
        cpus |= system.topology.cpus.get(n, frozenset())
    # memory bound to every node that has memory is not bound (as current_bindings says)
    capable = memory_capable(frozenset(system.topology.nodes), system.memory_nodes)
    mem_want = None if capable <= mem_target else mem_target
    # a relaunch bound as it already is changes nothing: only suggest a different binding
    if mem_now != mem_want or (cpu_now or frozenset(system.topology.cpu_nodes())) != target:
        out.append(f"numactl --cpunodebind={nodes_s} --membind={mem_s} -- <command>")
    remote_nodes = sorted(set(node_bytes) - mem_target)
    if verdict != "local" and remote_nodes:
        line = (f"migratepages {sample.pid} {format_cpulist(set(remote_nodes))} {nodes_s}"
                "   # move existing pages now (numactl package)")
        if mem_now is not None and not target <= mem_now:
            line += "; its policy keeps putting new pages elsewhere: relaunch as above"
        out.append(line)
    if sample.mismatches.get("memory_off_policy_nodes") and mem_now is not None:
        out.append(f"# its bind policy still names node(s) {format_cpulist(set(mem_now))}: "
                   f"relaunch with --membind={mem_s} so new pages follow the moved ones")
    if out and out[0].startswith("numactl"):
        dropin = ["[Service]", "NUMAPolicy=bind", f"NUMAMask={mem_s}"]
        if cpus:
            dropin.append(f"CPUAffinity={format_cpulist(set(cpus))}")
        if sample.mems_allowed is not None and not mem_target <= sample.mems_allowed:
            # the cgroup's cpuset forbids the target nodes: widen it too
            dropin.append(f"AllowedMemoryNodes={mem_s}")
            if cpus:
                dropin.append(f"AllowedCPUs={format_cpulist(set(cpus))}")
        where = (f"/etc/systemd/system/{unit}.d/numa.conf" if unit
                 else "/etc/systemd/system/<unit>.d/numa.conf")
        out.append(f"# systemd drop-in {where}:\n" + "\n".join(dropin))
    escaped = _escaped_remedy(sample)
    if escaped:
        out.append(escaped)
    if sample.mismatches.get("balancing_with_strict_binding"):
        out.append("sysctl -w kernel.numa_balancing=0   # balancing cannot move strictly "
                   "bound memory; it only costs hinting faults")
    return out


def _escaped_remedy(sample: ProcessSample) -> str:
    """Return the remedy line for threads outside the binding ("" when none is)."""
    audit = sample.thread_audit
    if audit is None or audit.binding is None or not audit.outside:
        return ""
    return (f"taskset -a -p {format_cpulist(set(audit.binding.cpus))} {sample.pid}   # every "
            "thread, now; for good, bind before the process creates threads (numactl or "
            "taskset on its command line, or sched_setaffinity before pthread_create)")


def binding_report(sample: ProcessSample) -> dict[str, Any] | None:
    """Return the process's binding as intended and the threads outside it (at most
    LISTED_THREADS listed, all counted); None when nothing binds it or it was not read."""
    audit = sample.thread_audit
    if audit is None or audit.binding is None:
        return None
    return {
        "cpus": format_cpulist(set(audit.binding.cpus)),
        "nodes": format_cpulist(set(audit.nodes)),
        "source": audit.binding.source,
        "threads_outside": audit.outside,
        "outside": [{"tid": tid, "cpus_allowed": format_cpulist(set(mask))}
                    for tid, mask in audit.escaped[:LISTED_THREADS]],
    }


def kubernetes_report(sample: ProcessSample, view: KubernetesView | None
                      ) -> dict[str, Any] | None:
    """Return the pod, container and kubelet assignment of the process (None outside a pod)."""
    ref = sample.kubernetes
    if ref is None:
        return None
    a = sample.kubelet
    return {
        "namespace": ref.namespace, "pod": ref.pod, "container": label_text(ref.container),
        "uid": ref.uid, "container_id": ref.container_id, "qos": ref.qos,
        "assigned_nodes": ({label_text(r): format_cpulist(set(n))
                            for r, n in sorted(a.by_resource().items())} if a else {}),
        "dra_devices": [{"driver": label_text(d.driver), "pool": label_text(d.pool),
                         "device": label_text(d.device), "claim": label_text(
                             f"{d.claim_namespace}/{d.claim}" if d.claim_namespace
                             else d.claim),
                         "node": format_cpulist(set(d.nodes)),
                         "paths": [label_text(p) for p in d.paths]}
                        for d in (a.dra if a else ())],
        "cpu_manager_policy": label_text(view.cpu_policy) if view is not None else "",
        "memory_manager_policy": label_text(view.memory_policy) if view is not None else "",
    }


def report(sample: ProcessSample, system: SystemSample, cg_path: str | None = None,
           unit: str | None = None, view: KubernetesView | None = None) -> dict[str, Any]:
    """Return the machine-readable inspection of a process (what ``--json`` prints);
    ``cg_path`` and ``unit`` are its systemd cgroup path and unit, where known, ``view``
    the node's Kubernetes view (the kubelet's policies)."""
    d = diagnose(sample, system, unit, view)
    nodes = sorted(set(system.topology.nodes) | set(sample.node_bytes()))
    table = {
        str(n): {k.value: sample.memory.get((n, k), 0) for k in Kind} for n in nodes
    }
    mem_now, cpu_now = current_bindings(sample, system)
    return {
        "pid": sample.pid,
        "comm": sample.comm,  # label text from its parser
        "start_time": sample.start_time,
        "cgroup": cg_path,
        "unit": unit,
        "kubernetes": kubernetes_report(sample, view),
        "rss_bytes": sample.rss_bytes,
        "memory_bytes": table,
        "threads_by_node": {str(k): v for k, v in sorted(sample.threads_by_node.items())},
        "cpus_allowed": format_cpulist(set(sample.cpus_allowed or ())),
        "mems_allowed": format_cpulist(set(sample.mems_allowed or ())),
        "memory_bound": sample.memory_bound,
        "memory_bound_nodes": format_cpulist(set(mem_now)) if mem_now is not None else None,
        "cpu_bound_nodes": format_cpulist(set(cpu_now)) if cpu_now is not None else None,
        "cpus_bound": sample.cpus_bound,
        "binding": binding_report(sample),
        "policies": sample.policy_bytes,
        "accelerators": [{"device": label_text(a.device),
                          "pci_address": label_text(a.pci_address), "node": a.node}
                         for a in sample.accelerators],
        "home": {"nodes": format_cpulist(set(sample.home.nodes)), "source": sample.home.source},
        "local_bytes": sample.locality.local_bytes,
        "remote_bytes": sample.locality.remote_bytes,
        "remote_ratio": sample.locality.remote_ratio,
        "remote_ratio_by_home": d.ratios,
        "tiers": tiers_report(sample.tiers, system),
        "numa_balancing": system.balancing_mode,
        "pages_migrated": sample.pages_migrated,
        "vmstat_numa_pages_migrated": system.vmstat.get("numa_pages_migrated"),
        "vmstat_pgmigrate_success": system.vmstat.get("pgmigrate_success"),
        "mismatches": sample.mismatches,
        "verdict": d.verdict,
        "summary": d.summary,
        "problems": list(d.problems),
        "remedies": list(d.remedies),
    }


def _mib(b: int) -> str:
    return f"{b / (1 << 20):10.2f}"


def _binding_lines(b: dict[str, Any] | None) -> list[str]:
    """Return the text lines of the binding and the threads outside it."""
    if b is None:
        return []
    out = [f"CPU binding       {b['cpus']} on node {b['nodes']} (from {b['source']}), "
           f"{b['threads_outside']} thread(s) outside"]
    for t in b["outside"]:
        out.append(f"  thread {t['tid']:<10} allowed on CPUs {t['cpus_allowed']}")
    if b["threads_outside"] > len(b["outside"]):
        out.append(f"  ... and {b['threads_outside'] - len(b['outside'])} more")
    return out


def render(rep: dict[str, Any]) -> str:
    """Return the human-readable inspection text."""
    out: list[str] = []
    out.append(f"Process {rep['pid']} ({rep['comm']})"
               + (f", unit {rep['unit']}" if rep["unit"] and not rep.get("kubernetes")
                  else ""))
    k = rep.get("kubernetes")
    if k:
        pod = f"{k['namespace']}/{k['pod']}" if k["pod"] else f"uid {k['uid']}"
        out.append(f"Pod {pod}, container {k['container'] or '?'} ({k['qos'] or 'QoS ?'}), "
                   f"{k['container_id']}")
        assigned = ", ".join(f"{r} {n or '-'}" for r, n in k["assigned_nodes"].items())
        out.append(f"Kubelet assigned  {assigned or 'nothing (shared CPUs, any memory node)'}"
                   f" [cpuManagerPolicy {k['cpu_manager_policy'] or '?'}, "
                   f"memoryManagerPolicy {k['memory_manager_policy'] or '?'}]")
        for d in k.get("dra_devices", ()):
            out.append(f"DRA device        {d['driver']}/{d['pool'] or '-'}/{d['device']} "
                       f"(claim {d['claim']}) on node {d['node'] or 'unknown'}"
                       + (f" [{', '.join(d['paths'])}]" if d["paths"] else ""))
    out.append("")
    kinds = [k.value for k in Kind]
    out.append("Resident memory by node (MiB)")
    out.append("node  " + "".join(f"{k:>10}" for k in kinds) + f"{'total':>10}  threads")
    for node, row in rep["memory_bytes"].items():
        total = sum(row.values())
        out.append(f"{node:<6}" + "".join(_mib(row[k]) for k in kinds) + _mib(total)
                   + f"  {rep['threads_by_node'].get(node, 0):>7}")
    out.append("")
    cpu_b, mem_b = rep["cpu_bound_nodes"], rep["memory_bound_nodes"]
    out.append(f"CPU affinity      {rep['cpus_allowed'] or '?'}"
               f"{f'  (bound to node {cpu_b})' if cpu_b else ''}")
    out.extend(_binding_lines(rep.get("binding")))
    out.append(f"Memory allowed    {rep['mems_allowed'] or '?'}")
    out.append(f"Memory bound to   {f'node {mem_b}' if mem_b else 'no node (any node allowed)'}")
    pol = ", ".join(f"{k} {v / (1 << 20):.1f} MiB" for k, v in sorted(rep["policies"].items()))
    out.append(f"Memory policies   {pol or '-'}")
    if rep["accelerators"]:
        acc = ", ".join(f"{a['device']} ({a['pci_address']}) on node "
                        f"{a['node'] if a['node'] >= 0 else 'unknown'}"
                        for a in rep["accelerators"])
        out.append(f"Accelerators      {acc}")
    else:
        out.append("Accelerators      none open")
    mode = rep["numa_balancing"]
    out.append(f"numa_balancing    {mode if mode is not None else 'absent'}"
               f"{' (' + BALANCING[mode] + ')' if mode in BALANCING else ''}")
    def na(v: object) -> str:
        return "n/a" if v is None else str(v)

    out.append(f"Pages migrated    process {na(rep['pages_migrated'])}, "
               f"system numa_pages_migrated {na(rep['vmstat_numa_pages_migrated'])}, "
               f"pgmigrate_success {na(rep['vmstat_pgmigrate_success'])}")
    out.append(f"Home nodes        {rep['home']['nodes'] or '-'} (from {rep['home']['source']})")
    for src, r in rep["remote_ratio_by_home"].items():
        out.append(f"  remote ratio vs {src:<12} {r:.3f}")
    tiers = render_tiers(rep.get("tiers"))
    if tiers:
        out.append("")
        out.extend(tiers)
    out.append("")
    out.append(f"Verdict: {rep['verdict'].upper()}: {rep['summary']}")
    for p in rep["problems"]:
        out.append(f"  - {p}")
    if rep["remedies"]:
        out.append("")
        out.append("Remedy:")
        for r in rep["remedies"]:
            out.extend("  " + line for line in r.splitlines())
    return "\n".join(out) + "\n"
