"""Run-time configuration: one frozen value built from flags (and the optional config file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from numa_exporter.patterns import Pattern
from numa_exporter.roots import Roots

DEFAULT_PORT = 10061

# --collector.damon.cgroups: the most cgroups one paddr kdamond carries a scheme for (each
# scheme walks the pages of the hot regions once per aggregation interval)
MAX_DAMON_CGROUPS = 32

@dataclass(frozen=True, slots=True)
class HomePin:
    """Config-file rule: processes whose comm or cmdline matches get these home nodes."""

    match: Pattern
    nodes: frozenset[int]


@dataclass(frozen=True, slots=True)
class AcceleratorPin:
    """Config-file rule: processes matching use these accelerator PCI addresses.

    ``memory_nodes``: the accelerators' own memory nodes, where their memory is itself a
    NUMA node (coherent CPU-GPU platforms; sysfs does not link a GPU to its memory node).
    """

    match: Pattern
    pci_addresses: tuple[str, ...]
    memory_nodes: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the daemon needs to run."""

    roots: Roots = field(default_factory=Roots)
    listen_address: str = f":{DEFAULT_PORT}"
    telemetry_path: str = "/metrics"
    scan_interval: float = 15.0
    scan_budget: float = 10.0
    min_resident: int = 64 << 20
    top: int = 200
    detail_above: int = 1 << 30  # placed bytes from which a process gets full detail; 0: all
    detail_top: int = 10  # the largest processes (placed bytes) in full whatever their size
    include: Pattern | None = None
    exclude: Pattern | None = None
    collectors: frozenset[str] | None = None  # enabled collectors; None: all of them
    log_level: str = "info"
    log_format: str = "logfmt"
    home_pins: tuple[HomePin, ...] = ()
    accelerator_pins: tuple[AcceleratorPin, ...] = ()
    accelerator_rdma: bool = False
    accelerator_records: Path | None = None
    config_file: Path | None = None
    warmup_age: float = 300.0
    warmup_scans: int = 4
    warmup_rss_tolerance: float = 0.05
    sampling: bool = True  # False: never sample, read every process in full
    hold_budget: float = 0.005  # longest mmap-lock hold a full read may cause, else sample
    full_interval: float = 0.0  # exact full reads of sampled processes this often (0: never)
    policy_interval: float = 300.0  # full reads of sampled processes for policies (0: never)
    policy_hold_budget: float = 0.1  # longest hold a full read for policies may cause
    process_budget: float = 0.5  # average full-read seconds one process may cost per scan
    kubelet_root_dir: str = "/var/lib/kubelet"  # a host path, under roots.rootfs
    # --collector.damon (off by default, root only): hot memory from the exporter's own
    # kdamonds; their ownership state lives under damon_run_dir
    damon: bool = False
    damon_run_dir: Path = Path("/run/numa-exporter")
    damon_sample: float = 0.005
    damon_aggregation: float = 0.1
    damon_max_regions: int = 1000
    damon_processes: int = 1
    damon_hot_threshold: float = 0.05
    damon_mode: str = "auto"  # auto, vaddr (per process) or paddr (per node, host-wide)
    damon_yield_to_modules: bool = False  # stop its kdamonds while a DAMON module is enabled
    damon_cgroups: int = 0  # cgroups watched by the paddr kdamond's memcg schemes (6.14+)

    def accelerator_memory(self) -> dict[str, frozenset[int]]:
        """Return PCI address -> memory nodes declared by the accelerator pins."""
        out: dict[str, frozenset[int]] = {}
        for pin in self.accelerator_pins:
            if pin.memory_nodes:
                for addr in pin.pci_addresses:
                    out[addr] = out.get(addr, frozenset()) | pin.memory_nodes
        return out

    def enabled(self, collector: str) -> bool:
        """Return whether the collector called ``collector`` is on.

        The names are the registry's (``collectors/registry.py``); this module does not
        import it (the collectors sit above the config), and a test checks that every name
        the code asks about is one of them.
        """
        if collector == "damon":  # the one collector off by default (--collector.damon)
            return self.damon
        return self.collectors is None or collector in self.collectors
