"""Real-kernel test bed: a Debian Linux kernel with several NUMA nodes under QEMU.

The guest boots a Debian ``linux-image-*-unsigned`` kernel with a tiny busybox initramfs,
mounts the host's root file system read-only over virtio-9p, mounts its own proc, sysfs,
devtmpfs, tmpfs and cgroup2 inside it and ``chroot``\\ s there, so that it runs the host's
``python3``, ``numactl`` and the project's virtual environment at identical paths. A second,
writable 9p share (``rkio``) carries the job script in and the results out.

Everything downloaded or built lives in a project-owned cache folder (``.cache/realkernel``
under the repository, or ``$NUMA_REALKERNEL_CACHE``). Only the standard library is used, so
the in-guest side and the developer tools can import this module without the venv.

Environment knobs:

* ``NUMA_REALKERNEL_CACHE``   - cache folder (default ``<repo>/.cache/realkernel``).
* ``NUMA_REALKERNEL_KERNEL``  - kernel package of the 6.1 generation (e.g.
  ``linux-image-6.1.0-57-amd64-unsigned``) or a path to a ``.deb``; default: the newest
  ``linux-image-6.1.0-*-amd64-unsigned`` apt knows.
* ``NUMA_REALKERNEL_KERNEL_6_12`` - the same for the 6.12 generation; default: the newest
  ``linux-image-6.12.*+deb12-amd64-unsigned`` (bookworm-security).
* ``NUMA_REALKERNEL_KERNEL_5_10`` / ``NUMA_REALKERNEL_KERNEL_7_3`` - the same for the 5.10
  generation (default: the newest ``linux-image-5.10.0-*-amd64-unsigned`` of Debian 11,
  ``bullseye``) and the 7.3 one (the newest ``linux-binary-unsigned-7.3.*+deb13-amd64`` of
  ``trixie-backports``, whose modules come from ``linux-modules-<release>``). Neither suite is
  in the host's apt sources: the harness downloads through a throwaway sources list and apt
  state of its own under the cache, removed after the download (the host's apt is untouched,
  nothing is installed).
* ``NUMA_REALKERNEL_MIRROR`` - the Debian mirror of those downloads (default
  ``http://deb.debian.org/debian``).
* ``NUMA_REALKERNEL_KERNELS`` - the generations the tier runs on, comma separated (default
  all: ``5.10,6.1,6.12,7.3``); a generation left out skips its tests with that reason. Left
  unset, 5.10 and 7.3 run only the scenarios whose outcome can differ there (see
  scenarios.EDGE_UNITS); named here, they run every scenario.
* ``NUMA_REALKERNEL_ACCEL``   - ``auto`` (default), ``tcg``, ``kvm`` or an ordered list
  (``kvm,tcg``: try KVM, fall back to TCG when the guest never reaches userland).
* ``NUMA_REALKERNEL_CPU``     - QEMU ``-cpu`` model (default ``max`` under TCG, ``host`` on KVM).
* ``NUMA_REALKERNEL_ECHO``    - set to 1 to stream the guest's serial console to stderr.
* ``NUMA_REALKERNEL_BOOT``    - ``vmlinux`` (default; PVH entry, faster) or ``vmlinuz``.
* ``NUMA_REALKERNEL_NO_APT``  - set to 1 to never call apt-get install (report what is missing).
* ``NUMA_REALKERNEL_TIMEOUT_FACTOR`` - multiplies every guest's time limit (default 1: the
  limits fit CI, where 6.1 and 6.12 run every scenario; a full run of 5.10 or 7.3 under TCG on
  a host shared with other work needs more: the 2-node guest's 11 scenarios took 690 s of
  its 720 on 5.10 there before balancing_off; 2.5 is enough).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import io
import json
import lzma
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

#: Modules the initramfs loads, in this order (from the same kernel package).
MODULES: tuple[str, ...] = (
    "netfs",
    "fscache",
    "9pnet",
    "9p",
    "virtio",
    "virtio_ring",
    "9pnet_virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
)

#: Debian packages providing the host-side tools: binary -> package. zstd unpacks 6.12's
#: kernel image (Python 3.11 has no zstd module); without it that kernel boots its bzImage.
HOST_TOOLS: dict[str, str] = {
    "qemu-system-x86_64": "qemu-system-x86",
    "busybox": "busybox-static",
    "numactl": "numactl",
    "numastat": "numactl",
    "gcc": "gcc",
    "zstd": "zstd",
}


@dataclass(frozen=True)
class Generation:
    """A kernel generation the tier runs on: Debian's unsigned image packages of one series.

    ``suite`` is the Debian suite to download from when the host's apt sources do not carry
    it (a throwaway sources list, see :func:`_private_apt`); ``modules_package`` turns the
    image package's name into the package holding its modules, for a kernel packaged with
    the two apart (7.3: ``linux-binary-unsigned-*`` and ``linux-modules-*``); "" when the
    image package carries its modules (5.10, 6.1, 6.12).
    """

    name: str  # "5.10", "6.1", "6.12", "7.3"
    pin_env: str  # environment variable pinning a package name or .deb path
    apt_regex: str  # apt-cache search --names-only pattern
    package: re.Pattern[str]  # a package name; group 1 the name, group 2.. its version
    deb_glob: str  # downloaded .debs of the generation in the cache
    suite: str = ""
    modules_package: tuple[str, str] = ("", "")  # (prefix of the image package, its modules')
    #: run every scenario when not named in $NUMA_REALKERNEL_KERNELS (False: only those
    #: whose outcome can differ on it, scenarios.EDGE_UNITS; the CI budget)
    everything_by_default: bool = True

    def modules_of(self, image_package: str) -> str:
        """Return the package holding the modules of ``image_package`` ("" when the same)."""
        old, new = self.modules_package
        if not old or not image_package.startswith(old):
            return ""
        return new + image_package[len(old):]


GENERATIONS: dict[str, Generation] = {
    # Debian 11's 5.10 LTS (bullseye main), standing in for the 5.x kernels of enterprise
    # fleets: packaged like 6.1 (xz image, modules in the image package)
    "5.10": Generation(
        "5.10", "NUMA_REALKERNEL_KERNEL_5_10", r"^linux-image-5\.10\.0-.*-amd64-unsigned$",
        re.compile(r"^(linux-image-5\.10\.0-(\d+)-amd64-unsigned)\b"),
        "linux-image-5.10.0-*-amd64-unsigned_*.deb", suite="bullseye",
        everything_by_default=False),
    "6.1": Generation(
        "6.1", "NUMA_REALKERNEL_KERNEL", r"^linux-image-6\.1\.0-.*-amd64-unsigned$",
        re.compile(r"^(linux-image-6\.1\.0-(\d+)-amd64-unsigned)\b"),
        "linux-image-6.1.0-*-amd64-unsigned_*.deb"),
    # 6.12 LTS from bookworm-security: DAMON (vaddr, paddr, sysfs), weighted interleave
    # and the PAGEMAP_SCAN ioctl, none of which 6.1 has; its image is zstd-compressed
    "6.12": Generation(
        "6.12", "NUMA_REALKERNEL_KERNEL_6_12",
        r"^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$",
        re.compile(r"^(linux-image-6\.12\.(\d+)\+deb12-amd64-unsigned)\b"),
        "linux-image-6.12.*+deb12-amd64-unsigned_*.deb"),
    # 7.3 from trixie-backports: the image alone in linux-binary-unsigned-<release> (at
    # usr/lib/modules/<release>/vmlinuz.unsigned, zstd), the modules in linux-modules-<release>
    # (xz; virtio and virtio_pci are built in, fscache is part of netfs)
    "7.3": Generation(
        "7.3", "NUMA_REALKERNEL_KERNEL_7_3",
        r"^linux-binary-unsigned-7\.3\.[0-9]+\+deb13-amd64$",
        re.compile(r"^(linux-binary-unsigned-7\.3\.(\d+)\+deb13-amd64)\b"),
        "linux-binary-unsigned-7.3.*+deb13-amd64_*.deb", suite="trixie-backports",
        modules_package=("linux-binary-unsigned-", "linux-modules-"),
        everything_by_default=False),
}
DEFAULT_GENERATION = "6.1"


def generations() -> list[str]:
    """Return the generations the tier runs on (``$NUMA_REALKERNEL_KERNELS``, default all)."""
    want = os.environ.get("NUMA_REALKERNEL_KERNELS")
    if not want:
        return list(GENERATIONS)
    return [g for g in (w.strip() for w in want.split(",")) if g in GENERATIONS]


def named(generation: str) -> bool:
    """Return True when ``$NUMA_REALKERNEL_KERNELS`` names ``generation``."""
    want = os.environ.get("NUMA_REALKERNEL_KERNELS") or ""
    return generation in [w.strip() for w in want.split(",")]


def budget_skip(unit: str, generation: str) -> str:
    """Return why ``unit`` (a scenario, or a guest module's name after ``test_``) is left out
    on ``generation`` by default for the CI budget ("" when it runs; scenarios.EDGE_UNITS), or
    that ``$NUMA_REALKERNEL_KERNELS`` leaves the generation out altogether."""
    from .scenarios import budget_skip as rule

    if generation not in generations():
        return f"kernel {generation} left out by NUMA_REALKERNEL_KERNELS"
    return rule(unit, generation, runs_everything(generation), named(generation))


def runs_everything(generation: str) -> bool:
    """Return True when every scenario runs on ``generation``: it is one of the generations
    that always do (6.1, 6.12), or ``$NUMA_REALKERNEL_KERNELS`` names it."""
    return GENERATIONS[generation].everything_by_default or named(generation)

#: Marker lines the initramfs prints on the serial console.
MARK = "@@RK"

#: Paths the guest hides under its own tmpfs; the project must not live below them.
_HIDDEN_IN_GUEST = ("/dev", "/proc", "/sys")
#: tmpfs in the guest; a checkout under one of these is shared into the guest on its own
_TMPFS_IN_GUEST = ("/tmp", "/run")

ASSET_FORMAT = 5  # bump when the initramfs layout changes


class RealKernelUnavailable(RuntimeError):
    """The host cannot run the real-kernel test bed (missing QEMU, kernel, or boot failure)."""


# ----------------------------------------------------------------------------------------
# Node layouts
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """A guest NUMA topology: one socket (and ``cpus_per_node`` vCPUs) per node."""

    name: str
    nodes: int
    mem_per_node_mib: int
    distances: tuple[tuple[int, ...], ...]
    cpus_per_node: int = 1

    @property
    def cpus(self) -> int:
        """Return the number of vCPUs of the guest."""
        return self.nodes * self.cpus_per_node

    @property
    def mem_mib(self) -> int:
        """Return the guest's total memory in MiB."""
        return self.nodes * self.mem_per_node_mib

    def qemu_args(self) -> list[str]:
        """Return the QEMU ``-smp``/``-m``/``-object``/``-numa`` arguments for this layout."""
        args = [
            "-smp",
            f"{self.cpus},sockets={self.nodes},cores={self.cpus_per_node},threads=1",
            "-m",
            f"{self.mem_mib}M",
        ]
        for n in range(self.nodes):
            args += ["-object", f"memory-backend-ram,id=m{n},size={self.mem_per_node_mib}M"]
            args += ["-numa", f"node,nodeid={n},memdev=m{n}"]
        for n in range(self.nodes):
            args += ["-numa", f"cpu,node-id={n},socket-id={n}"]
        for a in range(self.nodes):
            for b in range(self.nodes):
                if a != b:
                    args += ["-numa", f"dist,src={a},dst={b},val={self.distances[a][b]}"]
        return args


@dataclass(frozen=True)
class TierLayout(Layout):
    """CPU nodes (one socket each) followed by CPU-less memory nodes, with an ACPI HMAT.

    ``memory_nodes`` gives, per CPU-less node (node ids follow the CPU nodes), its size in
    MiB and its initiator: the CPU node QEMU's SRAT and HMAT name as its closest
    (``-numa node,initiator=``; required for every CPU-less node with ``hmat=on``).
    ``hmat`` lists (initiator, target, latency ns, bandwidth MiB/s) entries of the memory
    hierarchy (``-numa hmat-lb``). ``distances`` covers every node, CPU-less ones included.
    QEMU 7.2 has no ``acpi-generic-initiator`` object (9.0+), so generic initiator nodes
    cannot be declared here.
    """

    memory_nodes: tuple[tuple[int, int], ...] = ()
    hmat: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def mem_mib(self) -> int:
        """Return the guest's total memory in MiB, CPU-less nodes included."""
        return self.nodes * self.mem_per_node_mib + sum(m for m, _ in self.memory_nodes)

    def qemu_args(self) -> list[str]:
        """Return ``-machine hmat=on`` and the ``-smp``/``-m``/``-object``/``-numa`` arguments."""
        args = [
            "-machine", "hmat=on",
            "-smp", f"{self.cpus},sockets={self.nodes},cores={self.cpus_per_node},threads=1",
            "-m", f"{self.mem_mib}M",
        ]
        for n in range(self.nodes):
            args += ["-object", f"memory-backend-ram,id=m{n},size={self.mem_per_node_mib}M"]
            args += ["-numa", f"node,nodeid={n},memdev=m{n}"]
        for k, (mib, initiator) in enumerate(self.memory_nodes, start=self.nodes):
            args += ["-object", f"memory-backend-ram,id=m{k},size={mib}M"]
            args += ["-numa", f"node,nodeid={k},memdev=m{k},initiator={initiator}"]
        for n in range(self.nodes):
            args += ["-numa", f"cpu,node-id={n},socket-id={n}"]
        total = self.nodes + len(self.memory_nodes)
        for a in range(total):
            for b in range(total):
                if a != b:
                    args += ["-numa", f"dist,src={a},dst={b},val={self.distances[a][b]}"]
        for initiator, target, latency_ns, bandwidth_mib in self.hmat:
            lb = f"hmat-lb,initiator={initiator},target={target},hierarchy=memory"
            args += ["-numa", f"{lb},data-type=access-latency,latency={latency_ns}"]
            args += ["-numa", f"{lb},data-type=access-bandwidth,bandwidth={bandwidth_mib}M"]
        return args


LAYOUTS: dict[str, Layout] = {
    "2node": Layout("2node", 2, 1024, ((10, 20), (20, 10))),
    "4node": Layout(
        "4node",
        4,
        512,
        (
            (10, 16, 22, 28),
            (16, 10, 16, 22),
            (22, 16, 10, 16),
            (28, 22, 16, 10),
        ),
    ),
    # two sockets, and a CPU-less memory node near each (CXL-like expanders): node 2 is
    # closest to node 0, node 3 to node 1; HMAT gives every CPU-node -> node figure
    "tiers": TierLayout(
        "tiers",
        2,
        512,
        (
            (10, 20, 17, 28),
            (20, 10, 28, 17),
            (17, 28, 10, 28),
            (28, 17, 28, 10),
        ),
        memory_nodes=((512, 0), (512, 1)),
        hmat=(
            (0, 0, 80, 20480), (0, 1, 140, 10240), (0, 2, 250, 8192), (0, 3, 320, 4096),
            (1, 1, 80, 20480), (1, 0, 140, 10240), (1, 3, 250, 8192), (1, 2, 320, 4096),
        ),
    ),
}


# ----------------------------------------------------------------------------------------
# Assets
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assets:
    """Everything a boot needs; paths are absolute and inside the cache folder."""

    cache: Path
    qemu: str
    kernel_release: str
    kernel_package: str
    vmlinuz: Path
    vmlinux: Path | None
    initramfs: Path
    workload: Path
    notes: tuple[str, ...] = ()
    generation: str = DEFAULT_GENERATION


def cache_dir() -> Path:
    """Return the cache folder (created), from ``$NUMA_REALKERNEL_CACHE`` or the repo default."""
    env = os.environ.get("NUMA_REALKERNEL_CACHE")
    path = Path(env).resolve() if env else REPO / ".cache" / "realkernel"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log(msg: str) -> None:
    """Print a progress line on stderr (the harness's only logging)."""
    print(f"[realkernel] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: Sequence[str], timeout: float = 600, check: bool = True) -> str:
    """Run ``cmd`` and return its stdout; raise RealKernelUnavailable on failure if ``check``."""
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RealKernelUnavailable(f"{' '.join(cmd)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise RealKernelUnavailable(
            f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-800:]}"
        )
    return proc.stdout


def _privileged(cmd: list[str]) -> list[str]:
    """Return ``cmd`` prefixed for root (nothing when root, ``sudo -n`` otherwise)."""
    if os.geteuid() == 0:
        return cmd
    if shutil.which("sudo"):
        return ["sudo", "-n", *cmd]
    raise RealKernelUnavailable(f"need root to run {' '.join(cmd)} (not root, no sudo)")


def _apt(args: list[str], timeout: float = 900) -> None:
    """Run ``apt-get ARGS`` non-interactively under the shared apt lock (/tmp/apt.lock)."""
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
    cmd = _privileged([*env_cmd, "apt-get", "-y", "-q", *args])
    if shutil.which("flock"):
        cmd = ["flock", "/tmp/apt.lock", *cmd]
    _run(cmd, timeout=timeout)


def ensure_host_tools() -> list[str]:
    """Install missing host tools (qemu, busybox-static, numactl, gcc) through apt.

    Returns the list of packages that were installed (empty when everything was present).
    """
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if not shutil.which(tool)})
    if not Path("/bin/busybox").exists() and "busybox-static" not in missing:
        missing.append("busybox-static")
    if not missing:
        return []
    if os.environ.get("NUMA_REALKERNEL_NO_APT") == "1":
        raise RealKernelUnavailable(f"missing host packages {missing} and NUMA_REALKERNEL_NO_APT=1")
    if not shutil.which("apt-get"):
        raise RealKernelUnavailable(f"missing host packages {missing} and no apt-get")
    log(f"installing {' '.join(missing)} via apt-get")
    try:
        _apt(["install", "--no-install-recommends", *missing])
    except RealKernelUnavailable:
        _apt(["update"])
        _apt(["install", "--no-install-recommends", *missing])
    still = [t for t in HOST_TOOLS if not shutil.which(t)]
    if still:
        raise RealKernelUnavailable(f"still missing after apt-get install: {still}")
    return missing


def _busybox_path() -> Path:
    """Return a statically linked busybox binary (Debian's busybox-static)."""
    for cand in ("/bin/busybox", "/usr/bin/busybox"):
        p = Path(cand)
        if p.exists():
            out = _run(["file", "-L", str(p)], check=False) if shutil.which("file") else ""
            if "dynamically" in out:
                continue
            return p
    raise RealKernelUnavailable("no static busybox (install busybox-static)")


DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@contextlib.contextmanager
def _private_apt(cache: Path, suite: str) -> Iterator[list[str]]:
    """Yield apt options reading a throwaway sources list of Debian's ``suite`` (main), with
    package lists and archives of its own under the cache, after an ``apt-get update`` of it.

    The host's sources, lists and lock are never touched, so apt elsewhere keeps picking
    "the newest 6.1" from the host's suites; the folder is removed on the way out.
    """
    root = cache / "apt" / suite
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("NUMA_REALKERNEL_MIRROR", "http://deb.debian.org/debian")
    keyring = f"[signed-by={DEBIAN_KEYRING}] " if Path(DEBIAN_KEYRING).exists() else ""
    (root / "sources.list").write_text(f"deb {keyring}{mirror} {suite} main\n")
    opts = [f"-oDir::Etc::SourceList={root / 'sources.list'}",
            f"-oDir::Etc::SourceParts={root / 'parts'}",
            f"-oDir::State::Lists={root / 'lists'}", f"-oDir::Cache={root / 'cache'}",
            "-oDebug::NoLocking=1"]
    if os.geteuid() == 0:
        opts.append("-oAPT::Sandbox::User=root")  # the _apt user cannot write the cache
    try:
        log(f"apt-get update of a throwaway sources list: {mirror} {suite} main")
        _run(["apt-get", "-q", *opts, "update"], timeout=600)
        yield opts
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            root.parent.rmdir()


def _pick_kernel_package(gen: Generation, apt_opts: Sequence[str] = ()) -> str:
    """Return the kernel package to use: the env pin or the newest image of ``gen`` apt knows
    (through ``apt_opts``: a private sources list, for a suite the host lacks)."""
    pin = os.environ.get(gen.pin_env)
    if pin:
        return pin
    out = _run(["apt-cache", *apt_opts, "search", "--names-only", gen.apt_regex], check=False)
    found = []
    for line in out.splitlines():
        m = gen.package.match(line)
        if m:
            found.append((int(m.group(2)), m.group(1)))
    if not found:
        where = f"Debian's {gen.suite}" if gen.suite else "the host's apt sources"
        raise RealKernelUnavailable(
            f"apt knows no {gen.apt_regex} package in {where} (Debian 12 apt sources, "
            f"bookworm-security for 6.12, needed, or set {gen.pin_env} to a package name or "
            ".deb path)"
        )
    return max(found)[1]


def _cached_kernels(cache: Path, gen: Generation) -> list[Path]:
    """Return already downloaded kernel .debs of ``gen`` in the cache (with their modules'
    .deb, where packaged apart), newest first."""
    debs = [d for d in (cache / "dl").glob(gen.deb_glob) if _with_modules(d, gen) is not None]

    def version(p: Path) -> int:
        m = gen.package.match(p.name.split("_")[0])
        return int(m.group(2)) if m else -1

    return sorted(debs, key=version, reverse=True)


def _with_modules(deb: Path, gen: Generation) -> list[Path] | None:
    """Return ``deb`` and, where ``gen`` packages modules apart, the modules' .deb beside it
    (None when that one is missing)."""
    mods = gen.modules_of(deb.name.split("_")[0])
    if not mods:
        return [deb]
    found = sorted(deb.parent.glob(f"{mods}_*.deb"))
    return [deb, found[-1]] if found else None


def _download(dl: Path, packages: Sequence[str], apt_opts: Sequence[str]) -> None:
    """``apt-get download`` ``packages`` into ``dl`` (no root needed, nothing installed)."""
    log(f"downloading {' '.join(packages)}")
    subprocess.run(["apt-get", *apt_opts, "download", "-q", *packages], cwd=dl, check=True,
                   capture_output=True, text=True, timeout=900)


def _fetch_kernel_deb(cache: Path, gen: Generation) -> tuple[str, list[Path]]:
    """Return (package name, its .debs: the image's, then the modules' where apart),
    downloading with ``apt-get download`` when needed.

    A generation from a suite the host lacks is taken from the cache when there, without
    asking the network (delete ``<cache>/dl`` to pick a newer one)."""
    dl = cache / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    pin = os.environ.get(gen.pin_env, "")
    if pin.endswith(".deb"):
        debs = _with_modules(Path(pin).resolve(), gen)
        if debs is None:
            raise RealKernelUnavailable(
                f"{pin}: the modules' package {gen.modules_of(Path(pin).name.split('_')[0])} "
                "must lie beside it")
        return Path(pin).name.split("_")[0], debs
    if gen.suite and not pin:
        cached = _cached_kernels(cache, gen)
        if cached:
            return cached[0].name.split("_")[0], _with_modules(cached[0], gen) or []
    with contextlib.ExitStack() as stack:
        opts: list[str] = []
        if gen.suite:
            try:
                opts = stack.enter_context(_private_apt(cache, gen.suite))
            except RealKernelUnavailable as exc:
                raise RealKernelUnavailable(f"Debian {gen.suite} unreachable: {exc}") from exc
        try:
            pkg = _pick_kernel_package(gen, opts)
        except RealKernelUnavailable:
            cached = _cached_kernels(cache, gen)
            if cached:
                return cached[0].name.split("_")[0], _with_modules(cached[0], gen) or []
            raise
        wanted = [pkg] + ([gen.modules_of(pkg)] if gen.modules_of(pkg) else [])
        have = sorted(dl.glob(f"{pkg}_*.deb"))
        if have and _with_modules(have[-1], gen) is not None:
            return pkg, _with_modules(have[-1], gen) or []
        try:
            _download(dl, wanted, opts)
        except (OSError, subprocess.SubprocessError) as exc:
            cached = [] if pin else _cached_kernels(cache, gen)  # a pin is never swapped
            if cached:
                log(f"apt-get download {pkg} failed ({exc}); using cached {cached[0].name}")
                return cached[0].name.split("_")[0], _with_modules(cached[0], gen) or []
            detail = getattr(exc, "stderr", "") or ""
            raise RealKernelUnavailable(f"apt-get download {pkg} failed: {exc} {detail}") \
                from exc
    have = sorted(dl.glob(f"{pkg}_*.deb"))
    debs = _with_modules(have[-1], gen) if have else None
    if not debs:
        raise RealKernelUnavailable(f"apt-get download {' '.join(wanted)} left no .deb in {dl}")
    return pkg, debs


#: where a kernel package keeps its image: ``boot/vmlinuz-<release>`` (5.10, 6.1, 6.12) or
#: ``usr/lib/modules/<release>/vmlinuz.unsigned`` (7.3's linux-binary-unsigned-*)
_IMAGE_PATHS = (re.compile(r"^boot/vmlinuz-(?P<release>[^/]+)$"),
                re.compile(r"^(?:usr/)?lib/modules/(?P<release>[^/]+)/vmlinuz(?:\.unsigned)?$"))


def _extract_kernel(debs: Sequence[Path], dest: Path) -> str:
    """Unpack the image and the needed modules of ``debs`` into ``dest``; return the release.

    Modules of MODULES a package lacks are taken as built in (7.3: virtio, virtio_ring and
    virtio_pci are ``=y``, fscache is part of netfs); ``missing-modules.txt`` lists them.
    """
    dest.mkdir(parents=True, exist_ok=True)
    release = ""
    wanted = {f"{m}{suffix}" for m in MODULES for suffix in (".ko", ".ko.xz", ".ko.zst")}
    for deb in debs:
        fsys = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)],
                                stdout=subprocess.PIPE)
        assert fsys.stdout is not None
        with tarfile.open(fileobj=fsys.stdout, mode="r|") as tar:
            for member in tar:
                name = member.name.lstrip("./")
                if not member.isfile():
                    continue
                base = name.rsplit("/", 1)[-1]
                image = next((m for m in (r.match(name) for r in _IMAGE_PATHS) if m), None)
                if image is not None:
                    release = image.group("release")
                    target = dest / "vmlinuz"
                elif re.match(r"^(?:usr/)?lib/modules/", name) and (
                        base in wanted or base == "modules.builtin"):
                    target = dest / "modules" / base
                else:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                fh = tar.extractfile(member)
                assert fh is not None
                target.write_bytes(fh.read())
        if fsys.wait() != 0:
            raise RealKernelUnavailable(f"dpkg-deb --fsys-tarfile {deb} failed")
    if not release:
        raise RealKernelUnavailable(f"{' '.join(map(str, debs))}: no kernel image (boot/vmlinuz-*"
                                    " or usr/lib/modules/*/vmlinuz.unsigned)")
    have = {p.name.split(".ko")[0] for p in (dest / "modules").glob("*.ko*")}
    (dest / "missing-modules.txt").write_text(
        "".join(f"{m}\n" for m in MODULES if m not in have))
    return release


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def bzimage_payload(data: bytes) -> bytes | None:
    """Return the compressed kernel inside a bzImage, from its boot protocol header (2.08+:
    ``payload_offset``/``payload_length`` past the real-mode setup), or None if absent."""
    if len(data) < 0x250 or data[0x202:0x206] != b"HdrS":
        return None
    setup_sects = data[0x1F1] or 4
    offset = int.from_bytes(data[0x248:0x24C], "little")
    length = int.from_bytes(data[0x24C:0x250], "little")
    start = (setup_sects + 1) * 512 + offset
    if length <= 4 or start + length > len(data):
        return None
    return data[start:start + length]


def _unzstd(payload: bytes) -> bytes:
    """Return the decompressed zstd frame of a kernel payload ("" without the zstd tool).

    The kernel's build appends the decompressed size (4 bytes, little endian) after the
    frame; the zstd tool would read them as a second, broken frame, so they are cut.
    """
    if not payload.startswith(ZSTD_MAGIC) or not shutil.which("zstd"):
        return b""
    try:
        proc = subprocess.run(["zstd", "-dcq"], input=payload[:-4], capture_output=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return b""
    return proc.stdout if proc.returncode == 0 else b""


def extract_vmlinux(vmlinuz: Path, out: Path) -> bool:
    """Write the decompressed ELF kernel inside ``vmlinuz`` to ``out``: an xz payload (6.1)
    with Python's lzma, a zstd one (6.12) with the zstd tool.

    Returns True when an ELF image was found and written, False otherwise (the guest then
    boots the bzImage as shipped: about a second slower under TCG).
    """
    data = vmlinuz.read_bytes()
    payload = bzimage_payload(data)
    if payload is not None and payload.startswith(ZSTD_MAGIC):
        elf = _unzstd(payload)
        if elf[:4] == b"\x7fELF":
            tmp = out.with_suffix(".tmp")
            tmp.write_bytes(elf)
            tmp.replace(out)
            return True
        return False
    magic = b"\xfd7zXZ\x00"
    start = data.find(magic)
    while start >= 0:
        dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        try:
            elf = dec.decompress(data[start:])
        except lzma.LZMAError:
            elf = b""
        if elf[:4] == b"\x7fELF":
            tmp = out.with_suffix(".tmp")
            tmp.write_bytes(elf)
            tmp.replace(out)
            return True
        start = data.find(magic, start + 1)
    return False


def _decompress_module(path: Path) -> bytes:
    """Return the plain ELF bytes of a kernel module (.ko, .ko.xz or .ko.zst)."""
    raw = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(raw)
    if path.name.endswith(".zst"):
        return subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True).stdout
    return raw


def _module_depends(blob: bytes) -> list[str]:
    """Return the ``depends=`` list from a module's .modinfo strings."""
    m = re.search(rb"(?:^|\0)depends=([^\0]*)\0", blob)
    if not m or not m.group(1):
        return []
    return [d.decode().replace("-", "_") for d in m.group(1).split(b",") if d]


def _load_order(blobs: dict[str, bytes]) -> list[str]:
    """Return the modules of ``blobs`` ordered so each comes after its dependencies.

    Starts from the MODULES order and moves a module later only when a dependency requires it;
    dependencies absent from ``blobs`` are assumed built in.
    """
    deps = {m: [d for d in _module_depends(b) if d in blobs] for m, b in blobs.items()}
    order: list[str] = []
    seen: set[str] = set()

    def visit(m: str, stack: tuple[str, ...] = ()) -> None:
        if m in seen or m in stack:
            return
        for d in deps[m]:
            visit(d, (*stack, m))
        seen.add(m)
        order.append(m)

    for m in MODULES:
        if m in blobs:
            visit(m)
    return order


class _Cpio:
    """A minimal writer of the ``newc`` cpio format used by initramfs."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1) -> None:
        namez = name.encode() + b"\0"
        hdr = "070701" + "".join(
            f"{v:08x}"
            for v in (self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(namez), 0)
        )
        self.ino += 1
        self.buf.write(hdr.encode() + namez)
        self.buf.write(b"\0" * ((4 - (110 + len(namez)) % 4) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * ((4 - len(data) % 4) % 4))

    def dir(self, name: str) -> None:
        """Add a directory."""
        self._entry(name, stat.S_IFDIR | 0o755, nlink=2)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """Add a regular file."""
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        """Add a symbolic link."""
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def finish(self) -> bytes:
        """Return the archive bytes, with the trailer."""
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


INIT_SCRIPT = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /sbin /usr/bin /usr/sbin /newroot
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
read up idle < /proc/uptime
echo "@@RK userland uptime=$up"
for m in @MODULES@; do
  if [ -f /lib/modules/$m.ko ]; then
    insmod /lib/modules/$m.ko || echo "@@RK insmod-failed $m"
  fi
done
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
R=/newroot
i=0
until mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot $R; do
  i=$((i+1)); [ $i -gt 100 ] && { echo "@@RK fatal mount-hostroot"; poweroff -f; }
  sleep 0.1
done
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/shm $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup
# a checkout under /tmp or /run is hidden by the tmpfs above: its own share puts it back
REPO_DIR=$(sed -n 's/.*rkrepo=\([^ ]*\).*/\1/p' /proc/cmdline)
if [ -n "$REPO_DIR" ]; then
  mkdir -p $R$REPO_DIR
  mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose rkrepo $R$REPO_DIR || {
    echo "@@RK fatal mount-repo"; poweroff -f; }
fi
mkdir -p $R/tmp/rkio
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 rkio $R/tmp/rkio || {
  echo "@@RK fatal mount-rkio"; poweroff -f; }
read up idle < /proc/uptime
echo "@@RK chroot uptime=$up"
chroot $R /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/tmp TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8 \
  /bin/sh -c '/bin/sh /tmp/rkio/job.sh; echo $? > /tmp/rkio/job.rc' 2>&1 | tee $R/tmp/rkio/job.log
rc=$(cat $R/tmp/rkio/job.rc 2>/dev/null)
read up idle < /proc/uptime
echo "@@RK done rc=$rc uptime=$up"
sync
umount $R/tmp/rkio
poweroff -f
"""


def _build_initramfs(kdir: Path, out: Path) -> None:
    """Write a gzip'd newc initramfs with busybox, the 9p/virtio modules and /init to ``out``."""
    cpio = _Cpio()
    for d in ("bin", "sbin", "dev", "proc", "sys", "lib", "lib/modules", "newroot", "tmp"):
        cpio.dir(d)
    cpio.file("bin/busybox", _busybox_path().read_bytes(), 0o755)
    cpio.symlink("bin/sh", "busybox")
    blobs: dict[str, bytes] = {}
    for m in MODULES:
        for suffix in (".ko", ".ko.xz", ".ko.zst"):
            p = kdir / "modules" / f"{m}{suffix}"
            if p.exists():
                blobs[m] = _decompress_module(p)
                break
    mods = _load_order(blobs)
    for m in mods:
        cpio.file(f"lib/modules/{m}.ko", blobs[m])
    cpio.file("init", INIT_SCRIPT.replace("@MODULES@", " ".join(mods)).encode(), 0o755)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(cpio.finish(), compresslevel=1))
    tmp.replace(out)


def _build_workload(cache: Path) -> Path:
    """Compile workloads/rkwork.c with gcc into the cache; return the binary path."""
    src = HERE / "workloads" / "rkwork.c"
    out = cache / "bin" / "rkwork"
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    if not shutil.which("gcc"):
        raise RealKernelUnavailable("gcc not found (needed to build the workload)")
    tmp = out.with_name("rkwork.tmp")
    _run(["gcc", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", str(tmp), str(src)])
    tmp.replace(out)
    return out


def ensure_assets(generation: str = DEFAULT_GENERATION) -> Assets:
    """Make sure QEMU, busybox, numactl, the kernel of ``generation`` (a GENERATIONS key),
    vmlinux, initramfs and workload exist.

    Idempotent: installs only what is missing and reuses the cache. Returns the Assets.
    Raises RealKernelUnavailable with a reason when something cannot be provided, or when
    ``$NUMA_REALKERNEL_KERNELS`` leaves the generation out.
    """
    if generation not in generations():
        raise RealKernelUnavailable(f"kernel {generation} left out by NUMA_REALKERNEL_KERNELS")
    gen = GENERATIONS[generation]
    for hidden in _HIDDEN_IN_GUEST:
        if str(REPO).startswith(hidden + "/"):
            raise RealKernelUnavailable(
                f"the repository lives under {hidden}, which the guest overlays with its own "
                "file system; check it out elsewhere"
            )
    cache = cache_dir()
    for hidden in _HIDDEN_IN_GUEST:
        if str(cache).startswith(hidden + "/"):
            raise RealKernelUnavailable(f"NUMA_REALKERNEL_CACHE={cache} is hidden in the guest")
    if str(cache).startswith(tuple(t + "/" for t in _TMPFS_IN_GUEST)) and not str(
            cache).startswith(str(REPO) + "/"):
        raise RealKernelUnavailable(f"NUMA_REALKERNEL_CACHE={cache} is hidden in the guest "
                                    "(under a guest tmpfs and outside the checkout)")
    notes: list[str] = []
    with _locked(cache / ".lock"):
        installed = ensure_host_tools()
        if installed:
            notes.append(f"apt installed {' '.join(installed)}")
        qemu = shutil.which("qemu-system-x86_64")
        assert qemu is not None
        pkg, debs = _fetch_kernel_deb(cache, gen)
        kdir = cache / "kernel" / debs[0].stem
        stamp = kdir / "stamp.json"
        meta: dict[str, object] = {}
        if stamp.exists():
            meta = json.loads(stamp.read_text())
        if meta.get("format") != ASSET_FORMAT:
            log(f"extracting {' '.join(d.name for d in debs)}")
            if kdir.exists():
                shutil.rmtree(kdir)
            release = _extract_kernel(debs, kdir)
            has_elf = extract_vmlinux(kdir / "vmlinuz", kdir / "vmlinux")
            _build_initramfs(kdir, kdir / "initramfs.gz")
            meta = {"format": ASSET_FORMAT, "release": release, "package": pkg,
                    "vmlinux": has_elf}
            stamp.write_text(json.dumps(meta))
            notes.append(f"built kernel assets for {release}")
        workload = _build_workload(cache)
    return Assets(
        cache=cache,
        qemu=qemu,
        kernel_release=str(meta["release"]),
        kernel_package=pkg,
        vmlinuz=kdir / "vmlinuz",
        vmlinux=(kdir / "vmlinux") if meta.get("vmlinux") else None,
        initramfs=kdir / "initramfs.gz",
        workload=workload,
        notes=tuple(notes),
        generation=generation,
    )


# ----------------------------------------------------------------------------------------
# Booting
# ----------------------------------------------------------------------------------------


def timeout_factor() -> float:
    """Return ``$NUMA_REALKERNEL_TIMEOUT_FACTOR`` (default 1; at least 1): what every guest's
    time limit is multiplied by."""
    raw = os.environ.get("NUMA_REALKERNEL_TIMEOUT_FACTOR", "")
    try:
        return max(1.0, float(raw)) if raw else 1.0
    except ValueError as exc:
        raise RealKernelUnavailable(
            f"NUMA_REALKERNEL_TIMEOUT_FACTOR={raw!r} is not a number") from exc


def accel_candidates() -> list[str]:
    """Return the accelerators to try, best first (``$NUMA_REALKERNEL_ACCEL`` or auto-detect).

    KVM is only tried when /dev/kvm is usable and is a plain kvm_intel/kvm_amd (a nested
    ``kvm_pvm`` cannot run stock kernels); TCG is always the fallback.
    """
    want = os.environ.get("NUMA_REALKERNEL_ACCEL", "auto")
    if want != "auto":
        chosen = [a for a in want.split(",") if a in ("tcg", "kvm")]
        if not chosen:
            raise RealKernelUnavailable(f"NUMA_REALKERNEL_ACCEL={want!r}: use auto, tcg, kvm "
                                        "or a comma list such as kvm,tcg")
        return chosen
    mods = Path("/sys/module")
    plain_kvm = (mods / "kvm_intel").exists() or (mods / "kvm_amd").exists()
    if os.access("/dev/kvm", os.R_OK | os.W_OK) and plain_kvm and not (mods / "kvm_pvm").exists():
        return ["kvm", "tcg"]
    return ["tcg"]


@dataclass
class BootResult:
    """Outcome of one guest run; times are host wall-clock seconds from QEMU's start."""

    layout: str
    accel: str
    kernel: str
    boot_image: str
    results: Path
    rc: int | None
    userland_s: float | None
    guest_uptime_userland_s: float | None
    chroot_s: float | None
    total_s: float
    timed_out: bool
    console: str
    job_log: str
    attempts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Return True when the job ran to completion with exit status 0."""
        return self.rc == 0 and not self.timed_out

    def summary(self) -> dict[str, object]:
        """Return a JSON-able summary (no console text)."""
        d = asdict(self)
        d.pop("console")
        d.pop("job_log")
        d["results"] = str(self.results)
        return d


def _qemu_cmd(assets: Assets, layout: Layout, accel: str, image: Path, rkio: Path) -> list[str]:
    """Return the QEMU command line for one boot."""
    cpu = os.environ.get("NUMA_REALKERNEL_CPU") or ("host" if accel == "kvm" else "max")
    # numa_balancing=disable: no hinting PTEs armed during boot; scenarios that want
    # balancing switch the sysctl on themselves.
    append = ("console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off nokaslr tsc=reliable"
              " numa_balancing=disable")
    repo_share: list[str] = []
    if str(REPO).startswith(tuple(t + "/" for t in _TMPFS_IN_GUEST)):
        if " " in str(REPO):
            raise RealKernelUnavailable(f"checkout path {REPO} contains a space")
        append += f" rkrepo={REPO}"
        repo_share = ["-virtfs", f"local,path={REPO},mount_tag=rkrepo,security_model=none,"
                      "readonly=on,multidevs=remap"]
    return [
        assets.qemu,
        "-nodefaults",
        "-no-user-config",
        "-display", "none",
        "-monitor", "none",
        "-serial", "stdio",
        "-no-reboot",
        "-machine", "pc",
        "-accel", "tcg,thread=multi" if accel == "tcg" else "kvm",
        "-cpu", cpu,
        *layout.qemu_args(),
        "-kernel", str(image),
        "-initrd", str(assets.initramfs),
        "-append", append,
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={rkio},mount_tag=rkio,security_model=none,multidevs=remap",
        *repo_share,
    ]


_LIVE: set[subprocess.Popen[bytes]] = set()


def _kill_all_live() -> None:
    """Kill every QEMU this process started that is still running."""
    for proc in list(_LIVE):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


import atexit  # noqa: E402  (kept next to its only use)

atexit.register(_kill_all_live)


def _boot_once(
    assets: Assets, layout: Layout, accel: str, image: Path, rkio: Path, timeout: float,
    userland_timeout: float,
) -> BootResult:
    """Boot once and wait for the guest to power off; kill QEMU at ``timeout`` seconds."""
    cmd = _qemu_cmd(assets, layout, accel, image, rkio)
    (rkio / "qemu-cmd.txt").write_text(" ".join(cmd) + "\n")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _LIVE.add(proc)
    lines: list[str] = []
    marks: dict[str, tuple[float, str]] = {}
    echo = os.environ.get("NUMA_REALKERNEL_ECHO") == "1"

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            lines.append(line)
            if echo:
                print(f"[guest] {line}", file=sys.stderr, flush=True)
            if line.startswith(MARK):
                parts = line.split()
                if len(parts) > 1 and parts[1] not in marks:
                    marks[parts[1]] = (time.monotonic() - t0, line)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    timed_out = False
    deadline = t0 + timeout
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now > deadline or ("userland" not in marks and now > t0 + userland_timeout):
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        _LIVE.discard(proc)
        th.join(timeout=5)
    total = time.monotonic() - t0

    def uptime(key: str) -> float | None:
        if key not in marks:
            return None
        m = re.search(r"uptime=([\d.]+)", marks[key][1])
        return float(m.group(1)) if m else None

    rc: int | None = None
    rc_file = rkio / "job.rc"
    if rc_file.exists():
        with contextlib.suppress(ValueError):
            rc = int(rc_file.read_text().strip())
    job_log = (rkio / "job.log").read_text(errors="replace") if (rkio / "job.log").exists() else ""
    console = "\n".join(lines)
    (rkio / "console.log").write_text(console + "\n")
    return BootResult(
        layout=layout.name,
        accel=accel,
        kernel=assets.kernel_release,
        boot_image=image.name,
        results=rkio,
        rc=rc,
        userland_s=marks["userland"][0] if "userland" in marks else None,
        guest_uptime_userland_s=uptime("userland"),
        chroot_s=marks["chroot"][0] if "chroot" in marks else None,
        total_s=total,
        timed_out=timed_out,
        console=console,
        job_log=job_log,
    )


def boot(
    layout: Layout | str,
    script: str,
    timeout: float = 600,
    results: Path | None = None,
    assets: Assets | None = None,
    files: dict[str, str] | None = None,
) -> BootResult:
    """Boot a guest with ``layout``, run ``script`` (sh) in the chroot, and power it off.

    ``script`` runs as ``/tmp/rkio/job.sh``; whatever it writes under ``/tmp/rkio`` appears in
    ``results`` (a fresh temporary folder when None). ``files`` are extra text files put in the
    share first. QEMU is killed at ``timeout`` seconds (times :func:`timeout_factor`) whatever
    happens. Accelerators are tried
    in :func:`accel_candidates` order, falling back when a guest never reaches userland.
    Returns the BootResult of the last attempt (check ``.ok``).
    """
    lay = LAYOUTS[layout] if isinstance(layout, str) else layout
    assets = assets or ensure_assets()
    timeout *= timeout_factor()
    rkio = results or Path(tempfile.mkdtemp(prefix=f"realkernel-{lay.name}-"))
    rkio.mkdir(parents=True, exist_ok=True)
    images: list[Path] = []
    mode = os.environ.get("NUMA_REALKERNEL_BOOT", "vmlinux")
    if mode != "vmlinuz" and assets.vmlinux is not None:
        images.append(assets.vmlinux)
    images.append(assets.vmlinuz)
    attempts: list[str] = []
    result: BootResult | None = None
    start = time.monotonic()
    for accel in accel_candidates():
        for image in images:
            for stale in ("job.rc", "job.log"):
                (rkio / stale).unlink(missing_ok=True)
            (rkio / "job.sh").write_text(script)
            for name, text in (files or {}).items():
                (rkio / name).write_text(text)
            remaining = timeout - (time.monotonic() - start)
            if remaining < 20:
                break
            # KVM reaches userland in ~1 s; a stock kernel on a nested, incompatible KVM
            # dies or hangs early, so give up on it quickly and fall back to TCG.
            result = _boot_once(assets, lay, accel, image, rkio, remaining,
                                userland_timeout=30 if accel == "kvm" else 90)
            attempts.append(
                f"{accel}/{image.name}: userland={result.userland_s} rc={result.rc} "
                f"timed_out={result.timed_out}"
            )
            if result.userland_s is not None:
                result.attempts = attempts
                (rkio / "boot.json").write_text(json.dumps(result.summary(), indent=2))
                return result
            log(f"boot attempt {attempts[-1]} never reached userland; console tail:\n"
                + "\n".join(result.console.splitlines()[-15:]))
    if result is None:
        raise RealKernelUnavailable("no boot attempted (timeout too small?)")
    result.attempts = attempts
    (rkio / "boot.json").write_text(json.dumps(result.summary(), indent=2))
    return result


# ----------------------------------------------------------------------------------------
# Running scenarios
# ----------------------------------------------------------------------------------------


def run_scenarios(
    layout: str,
    scenarios: Sequence[str],
    results: Path,
    exporter: Sequence[str] | None,
    capture_roots: bool = False,
    timeout: float = 600,
    assets: Assets | None = None,
    port: int = 19100,
) -> BootResult:
    """Boot one ``layout`` guest and run ``scenarios`` one after the other inside it.

    ``exporter`` is the command that starts the exporter (e.g. ``[venv python, -m,
    numa_exporter]``), or None to only record the kernel's view. Per-scenario folders land in
    ``results/results/<scenario>/`` (see inguest.py). Returns the BootResult.
    """
    assets = assets or ensure_assets()
    plan = {
        "out": "/tmp/rkio/results",
        "workload": str(assets.workload),
        "exporter": list(exporter) if exporter else None,
        "scenarios": list(scenarios),
        "capture_roots": capture_roots,
        "port": port,
    }
    runner = HERE / "inguest.py"
    script = (
        "set -e\n"
        "cd /\n"
        f"exec /usr/bin/python3 {runner} /tmp/rkio/plan.json\n"
    )
    return boot(layout, script, timeout=timeout, results=results, assets=assets,
                files={"plan.json": json.dumps(plan, indent=1)})


# ----------------------------------------------------------------------------------------
# What a guest kernel offers (detected in the guest, never inferred from a version number)
# ----------------------------------------------------------------------------------------

#: feature -> what a test that needs it says when the kernel lacks it
FEATURES: dict[str, str] = {
    "damon_sysfs": "no DAMON sysfs interface (/sys/kernel/mm/damon/admin/kdamonds absent)",
    "weighted_interleave": "no weighted interleave (/sys/kernel/mm/mempolicy/"
                           "weighted_interleave absent)",
    "memory_tiers": "no memory tiers (/sys/devices/virtual/memory_tiering absent)",
    "balancing_mode_2": "numa_balancing mode 2 (memory tiering) refused by the kernel",
    "mpol_preferred_many": "set_mempolicy(MPOL_PREFERRED_MANY) refused (EINVAL)",
    "mpol_f_numa_balancing": "set_mempolicy(MPOL_BIND | MPOL_F_NUMA_BALANCING) refused (EINVAL)",
    "pagemap_scan": "no PAGEMAP_SCAN ioctl on /proc/PID/pagemap (ENOTTY)",
    "procmap_query": "no PROCMAP_QUERY ioctl on /proc/PID/maps (ENOTTY)",
    "node_reclaim_counters": "no pgscan/pgsteal/pgrefill in the node vmstat files",
    "sched_numa": "no NUMA lines in /proc/PID/sched",
    "damon_stat": "no DAMON_STAT module running a kdamond of its own",
}

PROBE_VERSION = 2  # bump when _PROBE learns a feature: the cached answers are asked again
_PROBE = r"""
import ctypes, errno, fcntl, json, os

def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""

def ioctl_known(path, request):
    # a zeroed argument (size 0) is refused with EINVAL where the ioctl exists, ENOTTY where not
    with open(path, "rb") as fh:
        try:
            fcntl.ioctl(fh, request, bytearray(128))
        except OSError as exc:
            return exc.errno != errno.ENOTTY
    return True

f = {}
f["damon_sysfs"] = os.path.isdir("/sys/kernel/mm/damon/admin/kdamonds")
f["damon_stat"] = read("/sys/module/damon_stat/parameters/enabled").strip() == "Y"
f["weighted_interleave"] = os.path.isdir("/sys/kernel/mm/mempolicy/weighted_interleave")
f["memory_tiers"] = os.path.isdir("/sys/devices/virtual/memory_tiering")
try:
    with open("/proc/sys/kernel/numa_balancing", "w") as fh:
        fh.write("2")
    f["balancing_mode_2"] = read("/proc/sys/kernel/numa_balancing").strip() == "2"
except OSError:
    f["balancing_mode_2"] = False
with open("/proc/sys/kernel/numa_balancing", "w") as fh:
    fh.write("0")
libc = ctypes.CDLL(None, use_errno=True)
mask = ctypes.c_ulong(1)
f["mpol_preferred_many"] = libc.syscall(238, 5, ctypes.byref(mask), ctypes.c_ulong(64)) == 0
libc.syscall(238, 0, None, ctypes.c_ulong(0))
f["mpol_f_numa_balancing"] = libc.syscall(238, 2 | (1 << 13), ctypes.byref(mask),
                                          ctypes.c_ulong(64)) == 0
libc.syscall(238, 0, None, ctypes.c_ulong(0))
f["pagemap_scan"] = ioctl_known("/proc/self/pagemap", (3 << 30) | (96 << 16) | (0x66 << 8) | 16)
f["procmap_query"] = ioctl_known("/proc/self/maps", (3 << 30) | (104 << 16) | (0x66 << 8) | 17)
f["node_reclaim_counters"] = "pgscan_kswapd" in read(
    "/sys/devices/system/node/node0/vmstat").split()
f["sched_numa"] = "numa_pages_migrated" in read("/proc/self/sched")
f["release"] = os.uname().release
with open("/tmp/rkio/features.json", "w") as fh:
    json.dump(f, fh, indent=1, sort_keys=True)
"""


def kernel_features(assets: Assets) -> dict[str, object]:
    """Return what the guest kernel of ``assets`` offers (FEATURES keys -> bool, and its
    ``release``), probed in one boot of the 2-node guest and kept beside the kernel's assets
    (the answer of an image never changes). Raises RealKernelUnavailable when it cannot boot.
    """
    kdir = assets.vmlinuz.parent
    cached = kdir / f"features-{ASSET_FORMAT}-{PROBE_VERSION}.json"
    with _locked(assets.cache / ".lock-features"):
        if cached.exists():
            return dict(json.loads(cached.read_text()))
        out = Path(tempfile.mkdtemp(prefix="realkernel-features-"))
        try:
            r = boot("2node", "/usr/bin/python3 /tmp/rkio/probe.py\n", timeout=180,
                     results=out, assets=assets, files={"probe.py": _PROBE})
            got = out / "features.json"
            if not r.ok or not got.exists():
                raise RealKernelUnavailable(
                    f"feature probe on {assets.kernel_release} failed (rc={r.rc}): "
                    f"{r.job_log[-1500:]}")
            shutil.copyfile(got, cached)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return dict(json.loads(cached.read_text()))


def missing_feature(assets: Assets, *needed: str) -> str:
    """Return why the guest kernel of ``assets`` cannot run a test needing ``needed`` (the
    first absent feature's FEATURES line, with the release), or "" when it offers them all."""
    have = kernel_features(assets)
    for name in needed:
        if not have.get(name):
            return f"kernel {assets.kernel_release}: {FEATURES[name]}"
    return ""
