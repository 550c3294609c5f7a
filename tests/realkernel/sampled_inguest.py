"""In-guest runner for the sampled-placement checks (run by test_sampled.py inside QEMU).

    <venv python> sampled_inguest.py PLAN.json

For each case of the plan it reserves huge pages if asked, starts the rkwork workload under
numactl, and once it is ready reads the workload's full numa_maps, then the sampled estimate
with several seeds, then numa_maps again; everything goes to ``<out>/<case>.json``. Runs with
the project's virtualenv (the guest sees this machine's root read-only).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled import compiled as sampled_compiled
from numa_exporter.readers.sampled.reader import (
    SampledRequest,
    SampledSettings,
    read_sampled,
    sampling_available,
)
from numa_exporter.sources.maps_query import MapsQueryUnsupported, with_maps_descriptor
from numa_exporter.sources.procfs import ProcFS

NODE_SYS = Path("/sys/devices/system/node")


def _hugepages(node: int, count: int) -> None:
    path = NODE_SYS / f"node{node}/hugepages/hugepages-2048kB/nr_hugepages"
    path.write_text(str(count))
    got = int(path.read_text())
    if got != count:
        raise RuntimeError(f"node{node} nr_hugepages: wanted {count}, kernel gave {got}")


def _bytes(b: dict[Any, int]) -> list[list[Any]]:
    return [[n, str(k), v] for (n, k), v in sorted(b.items())]


def run_case(case: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """Run one case; return its record."""
    rec: dict[str, Any] = {"case": case["name"], "errors": []}
    ready = Path(f"/tmp/rk-sampled-{case['name']}")
    ready.unlink(missing_ok=True)
    for node, count in case.get("hugepages", {}).items():
        _hugepages(int(node), count)
    argv = ["numactl", *case["numactl"], plan["workload"], "-m", case["mode"], "-s",
            str(case["size_mib"]), "-c", "0", "-r", str(ready), "-T", "600"]
    rec["argv"] = argv
    wl = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and wl.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not ready.exists():
            raise RuntimeError(f"workload not ready (rc={wl.poll()}): "
                               f"{wl.stderr.read().decode() if wl.stderr and wl.poll() else ''}")
        info = dict(line.split("=", 1) for line in ready.read_text().splitlines() if "=" in line)
        pid = int(info["pid"])
        pf = ProcFS(Path("/proc")).process(pid)
        status = parse_pid_status(pf.status())
        rec["status"] = {"rss_anon": status.rss_anon, "rss_file": status.rss_file,
                         "rss_shmem": status.rss_shmem, "hugetlb": status.hugetlb}
        t0 = time.monotonic()
        before = parse_numa_maps(pf.numa_maps())
        rec["full_s"] = time.monotonic() - t0
        rec["full"] = _bytes(before.bytes)
        rec["maps_query"] = _maps_query(pf.mm_dir, int(plan.get("page_size", 4096)))
        ests = []
        for seed in range(plan["seeds"]):
            for census in (plan["census_pages"], None):
                if census is None and seed:
                    continue  # one run with the default census threshold
                t0 = time.monotonic()
                conf = (SampledSettings(census_pages=census) if census is not None
                        else SampledSettings())
                est = read_sampled(pf, status, SampledRequest(rng=random.Random(seed)), conf)
                ests.append({
                    "seed": seed, "census_pages": census, "s": time.monotonic() - t0,
                    "bytes": _bytes(est.bytes), "samples": est.samples,
                    "resident_samples": est.resident_samples,
                    "unsampled_bytes": est.unsampled_bytes,
                    "budget_exhausted": est.budget_exhausted,
                    "stderr": {str(n): est.remote_ratio_stderr(frozenset({n}))
                               for n in range(plan["nodes"])},
                    "strata": [[str(s.kind), s.census, s.queried, s.resident, s.bytes]
                               for s in est.strata],
                })
        rec["estimates"] = ests
        rec["full_after"] = _bytes(parse_numa_maps(pf.numa_maps()).bytes)
    except Exception as exc:
        rec["errors"].append(f"{type(exc).__name__}: {exc}")
        rec["traceback"] = traceback.format_exc()
    finally:
        wl.kill()
        wl.wait()
        for node in case.get("hugepages", {}):
            try:
                _hugepages(int(node), 0)
            except (OSError, RuntimeError) as exc:
                rec["errors"].append(f"hugepages teardown: {exc}")
    return rec


def _maps_query(mm_dir: str, page: int) -> dict[str, Any]:
    """Return how the VMA list read by PROCMAP_QUERY compares with the maps text's: supported
    (False: the kernel answered ENOTTY), the strata equal, paths asked, kinds."""
    mounts = ("/dev/hugepages",)
    path = f"{mm_dir}/maps"
    text = sampled_compiled.parse_frame((Path(path).read_bytes(),), page, mounts,
                                        keep_known=True)
    try:
        query, asked = with_maps_descriptor(path, lambda fd: sampled_compiled.query_frame(
            fd, page, mounts, b""))
        _, asked_known = with_maps_descriptor(path, lambda fd: sampled_compiled.query_frame(
            fd, page, mounts, text.known))
    except MapsQueryUnsupported as exc:
        return {"supported": False, "why": str(exc)}

    def shape(p: sampled_compiled.Parsed) -> list[Any]:
        return [[str(k), list(s.starts), list(s.cumulative), s.largest]
                for k, s in p.strata.items()]

    return {"supported": True, "equal": shape(query) == shape(text), "asked": asked,
            "asked_known": asked_known, "kinds": [str(k) for k in text.strata]}


def main() -> int:
    """Run the plan in argv[1]; return 0 (errors are in the records)."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    Path("/sys/kernel/mm/transparent_hugepage/enabled").write_text("madvise")
    Path("/proc/sys/kernel/numa_balancing").write_text("0")
    ok, why = sampling_available(Path("/proc"))
    (out / "_available.json").write_text(json.dumps({"ok": ok, "why": why}))
    for case in plan["cases"]:
        t0 = time.monotonic()
        rec = run_case(case, plan) if ok else {"case": case["name"], "errors": [why]}
        rec["elapsed_s"] = time.monotonic() - t0
        (out / f"{case['name']}.json").write_text(json.dumps(rec, indent=1))
        print(f"== sampled {case['name']}: {rec['elapsed_s']:.1f} s errors={rec['errors']}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
