"""DAMON's sysfs interface (``/sys/kernel/mm/damon/admin``, 5.18+; tried regions 6.2+): the
exporter's own kdamonds, and never anyone else's.

Measured on 6.12: writing ``nr_kdamonds`` while any kdamond runs fails with EBUSY, and while
none runs it wipes every existing kdamond's configuration (someone's prepared setup);
growing ``nr_targets`` of a running kdamond and committing resets its target and stops it;
DAMON_RECLAIM and sysfs kdamonds exclude each other with EBUSY. So this driver:

* creates kdamonds only when ``nr_kdamonds`` is 0 (nobody else has any);
* otherwise uses only slots it can prove it owns: its state file (under a run directory)
  names the boot, the number of kdamonds it created and each slot's kdamond pid, and sysfs
  must agree: the same count, each slot running under the recorded pid, or stopped with
  exactly the configuration the driver writes. Anything else: it stands aside;
* never resizes, commits into, starts or stops a kdamond it does not own; stops its own on
  exit and keeps the state file, so that a restart recognises them.

The state file is evidence only where nobody else can write it: the run directory must be
owned by the exporter's user and writable by nobody else (else ``run_dir``: DAMON off,
counted, the daemon serves on); the file is opened without following links
(``O_NOFOLLOW``), must be a regular file of at most MAX_STATE_BYTES, and is replaced
atomically (an exclusively created temporary file in the same directory, renamed over it).
Even then a *running* slot counts as the exporter's only when its configuration is what the
driver writes (operations, intervals, region bounds, the one ``stat`` scheme and its access
pattern, and the recorded target pid), not by its thread pid alone: a forged file naming a
foreign kdamond's pid must not make the exporter take it over, stop it, or write
``nr_kdamonds`` (which wipes every kdamond's configuration, mm/damon/sysfs.c
``kdamonds_nr_store()``).

Two operation sets: ``vaddr`` (one kdamond per watched process) and ``paddr`` (one kdamond
over the physical ranges of every online node, host-wide), for kernels built with
DAMON_PADDR but not DAMON_VADDR. Mode ``auto`` takes vaddr where the kernel lists it in a
context's ``avail_operations`` (5.19+; a kernel without that file is taken to have vaddr),
else paddr.

Per-cgroup hot memory (``--collector.damon.cgroups``, paddr): the one paddr kdamond carries,
after its unfiltered ``stat`` scheme 0, one ``stat`` scheme per watched cgroup whose access
pattern takes only hot regions and whose one operations-layer filter (``ops_filters``, 6.15+;
``filters`` before) rejects every page not charged to the cgroup (``type`` memcg,
``memcg_path`` its path under the cgroup2 root, ``matching`` N, ``allow`` N): each tried
region then says in ``sz_filter_passed`` how many of its bytes are the cgroup's own pages
(6.14+; a filter matches pages charged to that memcg itself, not to its children). The
reject form passes the same pages whatever the kernel does with pages no filter matched
(6.14 lets them pass; 6.15+ gives them the opposite of the last filter's ``allow``), where an
allow filter alone would pass every page on 6.14. Whether the kernel offers per-filter bytes is
read from sysfs (a scheme's ``stats/sz_ops_filter_passed``), never from its version. The
watched cgroups' paths are part of the configuration the state file records and the
ownership check compares. Measured on 7.3: ``memcg`` is refused in ``core_filters`` (EINVAL);
an ``on`` or ``commit`` naming a path with no memcg (no such cgroup, or one without the memory
controller) fails with ENOMEM; a watched cgroup removed while the kdamond runs leaves it
running (its filter then matches nothing, or whichever memcg gets the id next), so the
worker checks each round that its cgroups still exist.

Every failure is a :class:`DamonUnavailable` with a reason (``absent``, ``busy``,
``foreign``, ``denied``, ``run_dir``, ``error``); the caller says it once and keeps serving.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.files import read_small

STATE_FILE = "damon.json"
MAX_STATE_BYTES = 64 << 10  # the driver writes a few hundred bytes; refuse runaway input
READ_BUSY_WAIT_S = 1.0  # an attribute read answering EBUSY is retried this long
READ_BUSY_STEP_S = 0.05
MAX_REGIONS_READ = 10_000  # tried_regions entries read per slot (max_regions bounds it)
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1


class DamonUnavailable(Exception):
    """DAMON cannot be used by the exporter now; ``reason`` says why in one word."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True, slots=True)
class DamonSettings:
    """Monitoring attributes the exporter's kdamonds run with."""

    sample_us: int = 5_000
    aggr_us: int = 100_000
    update_us: int = 1_000_000
    min_regions: int = 10
    max_regions: int = 1_000
    slots: int = 1  # kdamonds created (one watched process each; paddr: always 1)
    mode: str = "auto"  # operations: auto, vaddr or paddr
    cgroups: int = 0  # cgroups watched by one filtered stat scheme each (paddr); 0: none
    cgroup_min_accesses: int = 1  # a cgroup scheme's nr_accesses/min: only hot regions

    @property
    def max_accesses(self) -> int:
        """Return the largest ``nr_accesses`` a region can show (samples per aggregation)."""
        return max(1, self.aggr_us // self.sample_us)


@dataclass(frozen=True, slots=True)
class Region:
    """One region DAMON tried a scheme on: ``[start, end)``, accesses in the last
    aggregation interval and its age in aggregation intervals (not read: 0)."""

    start: int
    end: int
    nr_accesses: int
    age: int = 0
    passed: int | None = None  # sz_filter_passed: bytes that passed the scheme's filters


@dataclass(frozen=True, slots=True)
class RegionRead:
    """One read of a kdamond's tried regions: the regions whose values are sound, and how
    many were refused (a value that is no decimal of 0..2^64-1, ``nr_accesses`` above
    2^32-1, an end not above its start, or a file that could not be read)."""

    regions: list[Region]
    refused: int = 0


def _uint(fd_path: str, limit: int) -> int | None:
    """Return the unsigned decimal in the attribute ``fd_path`` (at most ``limit``), None
    when it holds anything else. Raises FileNotFoundError when it does not exist."""
    fd = os.open(fd_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        raw = os.read(fd, 32)
    finally:
        os.close(fd)
    text = raw.strip()
    if not text.isdigit() or len(text) > 20:
        return None
    v = int(text)
    return v if v <= limit else None


class KdamondStopped(DamonUnavailable):
    """The exporter's own kdamond is not running: its target exited (the kdamond stops by
    itself, mm/damon/core.c ``kdamond_need_stop()``), or something else wrote ``off``. An
    ``update_schemes_tried_regions`` then fails with EINVAL (already off: 6.12's
    ``damon_sysfs_handle_cmd()``, 6.14+'s ``damos_walk()``) or ECANCELED (stopped during the
    wait)."""

    def __init__(self, slot: int, detail: str) -> None:
        self.slot = slot
        super().__init__("stopped", f"kdamond {slot}: {detail}")


class CgroupGone(DamonUnavailable):
    """An ``on`` of the exporter's own paddr kdamond with cgroup schemes was refused with
    ENOMEM (measured on 7.3 for a path with no memcg), EINVAL or ENOENT: a watched cgroup
    may have gone. The kdamond is left stopped and the exporter's; the caller drops the
    cgroups that no longer exist and tries again."""

    def __init__(self, cgroups: Sequence[str], detail: str) -> None:
        self.cgroups = list(cgroups)
        super().__init__("gone", detail)


class TargetGone(DamonUnavailable):
    """The process to watch does not exist (``on`` answers EINVAL: the pid names no process,
    mm/damon/sysfs.c ``damon_sysfs_add_target()``)."""

    def __init__(self, pid: int, detail: str) -> None:
        self.pid = pid
        super().__init__("gone", f"pid {pid}: {detail}")


def _classify(path: Path, err: OSError) -> DamonUnavailable:
    if err.errno == errno.EBUSY:
        return DamonUnavailable("busy", f"{path}: in use by another DAMON user (EBUSY)")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return DamonUnavailable("denied", f"{path}: {err.strerror}")
    if err.errno == errno.ENOENT:
        return DamonUnavailable("absent", f"{path}: no such file")
    return DamonUnavailable("error", f"{path}: {err.strerror or err}")


class DamonSysfs:
    """The exporter's kdamonds under one sysfs root; its ownership state under ``run_dir``."""

    def __init__(self, sysfs: Path, run_dir: Path, settings: DamonSettings,
                 boot_id: str, sleep: Callable[[float], None] = time.sleep,
                 uid: int | None = None) -> None:
        self.admin = sysfs / "kernel" / "mm" / "damon" / "admin"
        self.kdamonds = self.admin / "kdamonds"
        self.run_dir = run_dir
        self.state_path = run_dir / STATE_FILE
        self.uid = os.geteuid() if uid is None else uid  # who must own the run directory
        self.settings = settings
        self.boot_id = boot_id
        self.sleep = sleep
        self.slots: list[int] = []  # owned kdamond indexes
        self.created = 0  # nr_kdamonds as the exporter wrote it
        self.pids: dict[int, int] = {}  # slot -> kdamond pid when running
        self.targets: dict[int, int] = {}  # slot -> pid_target written (vaddr)
        self.ops = "" if settings.mode == "auto" else settings.mode  # operations in use
        self.cgroups: list[str] = []  # memcg paths of schemes 1.. (paddr cgroup schemes)
        # whether the kernel offers per-filter passed bytes (None: not known yet)
        self.filter_bytes: bool | None = None

    # --- raw file access ------------------------------------------------------------------
    def _read(self, path: Path) -> str:
        """Return the stripped text of one DAMON attribute. A read answers EBUSY while
        another writer holds the DAMON sysfs lock (an ``update_schemes_tried_regions`` of
        someone else's waits up to an aggregation interval under it): retried for at most
        READ_BUSY_WAIT_S, then raised as ``busy``."""
        waited = 0.0
        while True:
            try:
                return read_small(path, "damon").decode("ascii", "replace").strip()
            except SourceError as err:
                cause = err.__cause__
                exc = _classify(path, cause if isinstance(cause, OSError)
                                else OSError(err.errno or errno.EIO, str(err)))
                if exc.reason != "busy" or waited >= READ_BUSY_WAIT_S:
                    raise exc from err
            self.sleep(READ_BUSY_STEP_S)
            waited += READ_BUSY_STEP_S

    def _write(self, path: Path, value: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)  # as `echo >` does
        except OSError as err:
            raise _classify(path, err) from err
        try:
            os.write(fd, value.encode())
        except OSError as err:
            raise _classify(path, err) from err
        finally:
            os.close(fd)

    def _int(self, path: Path) -> int:
        text = self._read(path)
        if not text.lstrip("-").isdigit() or len(text) > 24:
            raise DamonUnavailable("error", f"{path}: not a number: {text[:40]!r}")
        return int(text)

    def _ctx(self, slot: int) -> Path:
        return self.kdamonds / str(slot) / "contexts" / "0"

    def state(self, slot: int) -> str:
        """Return the slot's kdamond state (``on`` or ``off``)."""
        return self._read(self.kdamonds / str(slot) / "state")

    def kdamond_pid(self, slot: int) -> int:
        """Return the pid of the slot's kdamond thread (-1 when it is off)."""
        return self._int(self.kdamonds / str(slot) / "pid")

    # --- ownership ------------------------------------------------------------------------
    def claim(self) -> list[int]:
        """Return the slots this exporter owns: created now when nobody has any kdamond,
        recognised from the state file after a restart. Raises DamonUnavailable otherwise
        (``absent``: no DAMON sysfs; ``run_dir``: a run directory or state file others could
        have written, checked before anything is written; ``foreign``: another user's
        kdamonds, or a slot whose configuration is not the exporter's; ``busy``)."""
        if not self.kdamonds.is_dir():
            raise DamonUnavailable("absent", f"{self.admin}: no DAMON sysfs interface "
                                   "(CONFIG_DAMON_SYSFS off, or before 5.18)")
        os.close(self._run_dir_fd())  # an unsafe run directory: nothing is touched
        nr = self._int(self.kdamonds / "nr_kdamonds")
        if nr == 0:
            return self._create()
        recorded = self._recorded()
        if recorded is None:
            raise DamonUnavailable("foreign", f"{nr} kdamond(s) exist and none is the "
                                   "exporter's (no state of this boot); left untouched")
        created, slots, pids, ops, targets, cgroups = recorded
        if created != nr or slots != list(range(nr)):
            raise DamonUnavailable("foreign", f"nr_kdamonds is {nr}, the exporter created "
                                   f"{created}; left untouched")
        for slot in slots:
            if not self._ours(slot, pids.get(slot), ops, targets.get(slot), cgroups):
                raise DamonUnavailable("foreign", f"kdamond {slot} is not as the exporter "
                                       "left it; left untouched")
        self.ops, self.slots, self.created = ops, slots, nr
        self.cgroups = list(cgroups)
        self.pids = {s: p for s, p in pids.items() if self.state(s) == "on"}
        self.targets = dict(targets)
        self.filter_bytes = self._offers_filter_bytes(slots[0]) if slots else None
        want = self._wanted_mode(self._avail_operations() if slots else None)
        if want not in ("auto", ops):  # its own, in the other mode: redo them
            self._redo()
            return self._create()
        return slots

    def _redo(self) -> None:
        """Stop the exporter's own kdamonds and remove them (``nr_kdamonds`` 0), for a
        restart in the other mode: only when every kdamond there is is one of its own,
        stopped and configured as it left it (checked again after the stop). Raises
        ``foreign`` otherwise, having written nothing but its own kdamonds' ``off``."""
        self.release()
        nr = self._int(self.kdamonds / "nr_kdamonds")
        if nr != self.created or any(self.state(s) != "off" or not self._configured_as_ours(
                s, self.ops) for s in range(nr)):
            raise DamonUnavailable("foreign", "kdamonds changed while the exporter redid its "
                                   "own; nr_kdamonds left untouched")
        self._write(self.kdamonds / "nr_kdamonds", "0")
        self.slots, self.created, self.ops = [], 0, self.settings.mode
        self.pids, self.targets, self.cgroups = {}, {}, []

    def _ours(self, slot: int, pid: int | None, ops: str, target: int | None,
              cgroups: Sequence[str] = ()) -> bool:
        """Return whether slot's kdamond is still the exporter's own: configured exactly as
        the driver configures it (with the recorded cgroup schemes), and, when running,
        under the recorded thread pid and on the recorded target (vaddr)."""
        if not self._configured_as_ours(slot, ops, cgroups):
            return False
        if self.state(slot) != "on":
            return True
        if pid is None or self.kdamond_pid(slot) != pid:
            return False
        if ops == "vaddr":
            targets = self._ctx(slot) / "targets"
            return (target is not None and self._int(targets / "nr_targets") == 1
                    and self._int(targets / "0" / "pid_target") == target)
        return self._int(self._ctx(slot) / "targets" / "nr_targets") == 1

    def _configured_as_ours(self, slot: int, ops: str,
                            cgroups: Sequence[str] | None = None) -> bool:
        """Return whether kdamond ``slot`` holds exactly the configuration ``_configure``
        writes (one context of operations ``ops``, the settings' intervals and region bounds,
        one ``stat`` scheme matching every region) and, after it, one filtered scheme per
        cgroup of ``cgroups`` (default: the driver's own)."""
        ctx = self._ctx(slot)
        s = self.settings
        cg = self.cgroups if cgroups is None else list(cgroups)
        pattern = ctx / "schemes/0/access_pattern"
        try:
            return (self._int(self.kdamonds / str(slot) / "contexts" / "nr_contexts") == 1
                    and self._read(ctx / "operations") == ops
                    and self._int(ctx / "monitoring_attrs/intervals/sample_us") == s.sample_us
                    and self._int(ctx / "monitoring_attrs/intervals/aggr_us") == s.aggr_us
                    and self._int(ctx / "monitoring_attrs/intervals/update_us") == s.update_us
                    and self._int(ctx / "monitoring_attrs/nr_regions/min") == s.min_regions
                    and self._int(ctx / "monitoring_attrs/nr_regions/max") == s.max_regions
                    and self._int(ctx / "schemes/nr_schemes") == 1 + len(cg)
                    and self._read(ctx / "schemes/0/action") == "stat"
                    and all(self._int(pattern / n / "min") == 0
                            and self._int(pattern / n / "max") == hi
                            for n, hi in (("sz", U64_MAX), ("nr_accesses", U32_MAX),
                                          ("age", U32_MAX)))
                    and all(self._cgroup_scheme_is_ours(ctx / "schemes" / str(i), path)
                            for i, path in enumerate(cg, 1)))
        except DamonUnavailable as exc:
            if exc.reason == "absent":
                return False
            raise

    def _cgroup_scheme_is_ours(self, scheme: Path, memcg: str) -> bool:
        """Return whether ``scheme`` is a cgroup scheme as ``_write_cgroup_scheme`` writes
        it for ``memcg``: ``stat``, hot regions only, one memcg filter rejecting the pages
        of every other memcg."""
        pattern = scheme / "access_pattern"
        f = scheme / _filter_dir(scheme)
        return (self._read(scheme / "action") == "stat"
                and self._int(pattern / "nr_accesses/min") == self.settings.cgroup_min_accesses
                and self._int(pattern / "nr_accesses/max") == U32_MAX
                and all(self._int(pattern / n / "min") == 0
                        and self._int(pattern / n / "max") == hi
                        for n, hi in (("sz", U64_MAX), ("age", U32_MAX)))
                and self._int(f / "nr_filters") == 1
                and self._read(f / "0/type") == "memcg"
                and self._read(f / "0/matching") == "N"
                and self._read(f / "0/allow") == "N"
                and self._read(f / "0/memcg_path") == memcg)

    # --- the run directory and the state file ----------------------------------------------
    def _run_dir_fd(self) -> int:
        """Return an open descriptor of the run directory (created 0700 when missing), after
        checking that nobody but the exporter's user can have written in it: not a link,
        a directory, owned by the exporter's user, not writable by group or others. Raises
        DamonUnavailable ``run_dir`` otherwise."""
        d = self.run_dir
        try:
            if not os.path.lexists(d):
                os.makedirs(d, mode=0o700, exist_ok=True)
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            raise DamonUnavailable("run_dir", f"{d}: {err.strerror or err} (not a directory, "
                                   "or a link: --collector.damon.run-dir must be the "
                                   "exporter's own directory)") from err
        st = os.fstat(fd)
        problem = ""
        if st.st_uid != self.uid:
            problem = f"owned by uid {st.st_uid}, not the exporter's uid {self.uid}"
        elif st.st_mode & 0o022:
            problem = f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
        if problem:
            os.close(fd)
            raise DamonUnavailable("run_dir", f"{d}: {problem}; its state file could be "
                                   "forged, so DAMON stays off (chown/chmod go-w, or another "
                                   "--collector.damon.run-dir)")
        return fd

    def _load_state(self) -> bytes | None:
        """Return the state file's bytes (None when there is none). Opened without following
        a link and without blocking (a FIFO), a regular file of at most MAX_STATE_BYTES;
        anything else raises DamonUnavailable ``run_dir``."""
        dfd = self._run_dir_fd()
        try:
            try:
                fd = os.open(STATE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as err:
                raise DamonUnavailable("run_dir", f"{self.state_path}: {err.strerror or err} "
                                       "(a link is never followed)") from err
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_STATE_BYTES:
                    raise DamonUnavailable("run_dir", f"{self.state_path}: not a regular file "
                                           f"of at most {MAX_STATE_BYTES} bytes; refused")
                data = os.read(fd, MAX_STATE_BYTES + 1)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)
        if len(data) > MAX_STATE_BYTES:
            raise DamonUnavailable("run_dir", f"{self.state_path}: over {MAX_STATE_BYTES} "
                                   "bytes; refused")
        return data

    def _recorded(self) -> tuple[int, list[int], dict[int, int], str, dict[int, int],
                                 list[str]] | None:
        """Return (nr_kdamonds created, owned slots, slot -> kdamond pid, operations,
        slot -> target pid, cgroup scheme paths) of this boot's state file, or None (absent,
        another boot's, or not the driver's format; a state file without ``operations`` is
        vaddr's, the only mode it had; without ``cgroups``, none). Raises ``run_dir`` for a
        state file that is not a bounded regular file."""
        data = self._load_state()
        if data is None:
            return None
        try:
            raw = json.loads(data)
        except ValueError:
            return None
        if not self.boot_id or not isinstance(raw, dict) or raw.get("boot_id") != self.boot_id:
            return None
        nr, slots, pids = raw.get("nr_kdamonds"), raw.get("slots"), raw.get("pids", {})
        ops, targets = raw.get("operations", "vaddr"), raw.get("targets", {})
        cgroups = raw.get("cgroups", [])
        if not isinstance(cgroups, list) or not all(_memcg_path_ok(c) for c in cgroups):
            return None
        if (ops not in ("vaddr", "paddr") or not isinstance(nr, int)
                or not isinstance(slots, list) or not isinstance(pids, dict)
                or not isinstance(targets, dict)
                or not all(isinstance(x, int) and 0 <= x < nr for x in slots)
                or not all(isinstance(v, int) and isinstance(k, str) and k.isdigit()
                           for d in (pids, targets) for k, v in d.items())):
            return None
        return (nr, slots, {int(k): v for k, v in pids.items()}, ops,
                {int(k): v for k, v in targets.items()}, list(cgroups))

    def _save(self) -> None:
        """Write the state file atomically: an exclusively created temporary file (never
        following a link) in the checked run directory, renamed over the old one."""
        data = json.dumps({"boot_id": self.boot_id, "nr_kdamonds": self.created,
                           "slots": self.slots,
                           "pids": {str(k): v for k, v in self.pids.items()},
                           "targets": {str(k): v for k, v in self.targets.items()},
                           "operations": self.ops, "cgroups": self.cgroups,
                           "settings": asdict(self.settings)}).encode()
        dfd = self._run_dir_fd()
        tmp = f".{STATE_FILE}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, STATE_FILE, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise DamonUnavailable("run_dir", f"{self.state_path}: cannot write the state "
                                   f"file: {err.strerror or err}") from err
        finally:
            os.close(dfd)

    def _create(self) -> list[int]:
        """Create the exporter's kdamonds (nobody has any): one first, to ask its context
        which operation sets the kernel has; then as many as the mode needs."""
        self._write(self.kdamonds / "nr_kdamonds", "1")
        self.slots, self.created = [0], 1
        self._write(self.kdamonds / "0" / "contexts" / "nr_contexts", "1")
        try:
            if self.settings.cgroups:  # a scheme of its own says whether it has them
                self._write(self._ctx(0) / "schemes" / "nr_schemes", "1")
                self.filter_bytes = self._offers_filter_bytes(0)
            self.ops = self._choose_ops(self._avail_operations())
        except DamonUnavailable:
            self._write(self.kdamonds / "nr_kdamonds", "0")  # its own, unstarted: undo
            self.slots, self.created = [], 0
            raise
        n = self.settings.slots if self.ops == "vaddr" else 1
        if n != 1:
            self._write(self.kdamonds / "nr_kdamonds", str(n))
            self.slots, self.created = list(range(n)), n
        for slot in self.slots:
            self._configure(slot)
        self._save()
        return self.slots

    def _avail_operations(self) -> set[str] | None:
        """Return the operation sets the kernel lists in the exporter's own first context
        (None before 5.19, which lacks ``avail_operations``)."""
        try:
            text = self._read(self._ctx(0) / "avail_operations")
        except DamonUnavailable as exc:
            if exc.reason == "absent":
                return None
            raise
        return {line.strip() for line in text.splitlines() if line.strip()}

    def _choose_ops(self, avail: set[str] | None) -> str:
        """Return the operation set to use: the forced mode, or vaddr where available and
        else paddr. Raises ``absent`` when the kernel lacks the one needed."""
        want = self._wanted_mode(avail)
        have = avail if avail is not None else {"vaddr", "paddr"}
        if want == "auto":
            want = "vaddr" if "vaddr" in have else "paddr"
        if want not in have:
            raise DamonUnavailable("absent", f"DAMON has no {want} operations (it lists "
                                   f"{', '.join(sorted(have)) or 'none'})")
        return want

    def _wanted_mode(self, avail: set[str] | None) -> str:
        """Return the mode to run: the forced one; with cgroups asked for and per-filter
        bytes offered, paddr (where listed); else ``auto``."""
        if (self.settings.mode == "auto" and self.settings.cgroups and self.filter_bytes
                and (avail is None or "paddr" in avail)):
            return "paddr"
        return self.settings.mode

    def _offers_filter_bytes(self, slot: int) -> bool:
        """Return whether the kernel offers per-filter passed bytes (6.14+), read from the
        first scheme of the exporter's own kdamond ``slot``: its ``stats`` has
        ``sz_ops_filter_passed``."""
        return (self._ctx(slot) / "schemes" / "0" / "stats" / "sz_ops_filter_passed").is_file()

    def _write_scheme(self, scheme: Path, min_accesses: int = 0) -> None:
        """Write a ``stat`` scheme of every region (``min_accesses`` 0) or of the regions
        accessed at least ``min_accesses`` times in an aggregation interval."""
        self._write(scheme / "action", "stat")
        pattern = scheme / "access_pattern"
        for name, lo, hi in (("sz", 0, U64_MAX), ("nr_accesses", min_accesses, U32_MAX),
                             ("age", 0, U32_MAX)):
            self._write(pattern / name / "min", str(lo))
            self._write(pattern / name / "max", str(hi))

    def _write_cgroup_scheme(self, scheme: Path, memcg: str) -> None:
        """Write the stat scheme of one cgroup: hot regions only, one memcg filter that
        rejects the pages not charged to ``memcg`` (``matching`` N, ``allow`` N), so that
        only its pages pass (in ``ops_filters`` where the kernel has it)."""
        self._write_scheme(scheme, self.settings.cgroup_min_accesses)
        f = scheme / _filter_dir(scheme)
        self._write(f / "nr_filters", "1")
        self._write(f / "0" / "type", "memcg")
        self._write(f / "0" / "memcg_path", memcg)
        self._write(f / "0" / "matching", "N")
        self._write(f / "0" / "allow", "N")

    def _set_cgroups(self, slot: int, cgroups: Sequence[str]) -> None:
        """Rewrite the schemes of the exporter's own stopped paddr kdamond ``slot``: the
        unfiltered scheme, then one per cgroup (``nr_schemes`` remakes them all), and
        record them."""
        schemes = self._ctx(slot) / "schemes"
        self._write(schemes / "nr_schemes", str(1 + len(cgroups)))
        self._write_scheme(schemes / "0")
        for i, memcg in enumerate(cgroups, 1):
            self._write_cgroup_scheme(schemes / str(i), memcg)
        self.cgroups = list(cgroups)
        self._save()

    def _configure(self, slot: int) -> None:
        """Write the exporter's configuration into its own, stopped kdamond ``slot``."""
        s = self.settings
        kd = self.kdamonds / str(slot)
        self._write(kd / "contexts" / "nr_contexts", "1")
        ctx = self._ctx(slot)
        self._write(ctx / "operations", self.ops)
        attrs = ctx / "monitoring_attrs"
        for name, v in (("sample_us", s.sample_us), ("aggr_us", s.aggr_us),
                        ("update_us", s.update_us)):
            self._write(attrs / "intervals" / name, str(v))
        self._write(attrs / "nr_regions" / "min", str(s.min_regions))
        self._write(attrs / "nr_regions" / "max", str(s.max_regions))
        self._write(ctx / "schemes" / "nr_schemes", "1")
        self._write_scheme(ctx / "schemes" / "0")
        self.cgroups = []

    # --- targets --------------------------------------------------------------------------
    def watch(self, slot: int, pid: int) -> None:
        """Point the exporter's own kdamond ``slot`` at process ``pid`` and start it. Raises
        TargetGone when the kernel finds no such process, and ``foreign`` (giving up every
        slot) when the stopped kdamond no longer holds the exporter's configuration:
        something else took it, and starting it would run their scheme."""
        self._own(slot)
        if self.ops != "vaddr":
            raise DamonUnavailable("error", f"kdamond {slot} runs {self.ops}, not vaddr")
        self.stop(slot)
        self._still_ours(slot)
        targets = self._ctx(slot) / "targets"
        self._write(targets / "nr_targets", "1")
        self._write(targets / "0" / "pid_target", str(pid))
        self.targets[slot] = pid
        state = self.kdamonds / str(slot) / "state"
        try:
            fd = os.open(state, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        except OSError as err:
            raise _classify(state, err) from err
        try:
            os.write(fd, b"on")
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ESRCH):
                raise TargetGone(pid, f"{state}: {err.strerror}") from err
            raise self._start_failed(_classify(state, err)) from err
        finally:
            os.close(fd)
        self.pids[slot] = self.kdamond_pid(slot)
        self._save()

    def _still_ours(self, slot: int) -> None:
        """Raise ``foreign`` (and give up every slot) unless the stopped kdamond ``slot``
        holds the exporter's configuration."""
        if not self._configured_as_ours(slot, self.ops):
            self.slots, self.pids = [], {}
            raise DamonUnavailable("foreign", f"kdamond {slot} was reconfigured by someone "
                                   "else while stopped; left untouched")

    def watch_physical(self, slot: int, ranges: Sequence[tuple[int, int]],
                       cgroups: Sequence[str] | None = None) -> None:
        """Point the exporter's own paddr kdamond ``slot`` at the physical ``ranges``
        (sorted, non-overlapping ``[start, end)``: each node's memory), with one filtered
        scheme per cgroup of ``cgroups`` (None: those it has), and start it. Raises
        CgroupGone when the kernel refuses a start with cgroup schemes (ENOMEM, EINVAL,
        ENOENT)."""
        self._own(slot)
        if self.ops != "paddr":
            raise DamonUnavailable("error", f"kdamond {slot} runs {self.ops}, not paddr")
        self.stop(slot)
        self._still_ours(slot)
        if cgroups is not None and list(cgroups) != self.cgroups:
            bad = [c for c in cgroups if not _memcg_path_ok(c)]
            if bad:
                raise DamonUnavailable("error", f"cgroup path refused: {bad[0][:80]!r}")
            self._set_cgroups(slot, cgroups)
        targets = self._ctx(slot) / "targets"
        self._write(targets / "nr_targets", "1")
        regions = targets / "0" / "regions"
        self._write(regions / "nr_regions", str(len(ranges)))
        for i, (start, end) in enumerate(ranges):
            self._write(regions / str(i) / "start", str(start))
            self._write(regions / str(i) / "end", str(end))
        try:
            self._write(self.kdamonds / str(slot) / "state", "on")
        except DamonUnavailable as exc:
            cause = exc.__cause__
            if (self.cgroups and isinstance(cause, OSError)
                    and cause.errno in (errno.ENOMEM, errno.EINVAL, errno.ENOENT)):
                raise CgroupGone(self.cgroups, f"kdamond {slot}: the start with "
                                 f"{len(self.cgroups)} cgroup scheme(s) was refused "
                                 f"({errno.errorcode.get(cause.errno, cause.errno)}): a "
                                 "watched cgroup may be gone") from exc
            raise self._start_failed(exc) from exc
        self.pids[slot] = self.kdamond_pid(slot)
        self._save()

    def _start_failed(self, exc: DamonUnavailable) -> DamonUnavailable:
        """Undo the exporter's kdamonds after an ``on`` the kernel refused (another
        exclusive kdamond runs: DAMON_STAT's from boot answers EBUSY, measured on 7.3; the
        modules' EIO on 6.12), so that no kdamond of its configuration that never ran is
        left behind: ``nr_kdamonds`` is written back to the 0 it found (it creates only
        where there was none), only when every kdamond there is is one of its own, stopped
        and configured as it left it; the state file then records none. A later claim
        creates them again. Returns ``exc`` (with what was done) for the caller to raise."""
        said = str(exc).removeprefix(f"{exc.reason}: ")
        try:
            nr = self._int(self.kdamonds / "nr_kdamonds")
            if nr != self.created or any(
                    s not in self.slots or self.state(s) != "off"
                    or not self._configured_as_ours(s, self.ops) for s in range(nr)):
                return DamonUnavailable(exc.reason, f"{said}; kdamonds not all the exporter's "
                                        "own and stopped: nr_kdamonds left untouched")
            self._write(self.kdamonds / "nr_kdamonds", "0")
        except DamonUnavailable as undo:
            return DamonUnavailable(exc.reason, f"{said}; its own kdamonds could not be "
                                    f"removed: {undo}")
        self.slots, self.created = [], 0
        self.pids, self.targets, self.cgroups = {}, {}, []
        self._save()
        return DamonUnavailable(exc.reason, f"{said}; the start was refused, the exporter's "
                                "kdamonds removed (nr_kdamonds 0)")

    def stop(self, slot: int, wait_s: float = 5.0) -> None:
        """Stop the exporter's own kdamond ``slot`` (nothing when it is off)."""
        self._own(slot)
        if self.state(slot) != "on":
            return
        with contextlib.suppress(DamonUnavailable):  # it may stop by itself (target exited)
            self._write(self.kdamonds / str(slot) / "state", "off")
        waited = 0.0
        while self.state(slot) == "on" and waited < wait_s:
            self.sleep(0.02)
            waited += 0.02
        self.pids.pop(slot, None)

    def release(self) -> None:
        """Stop every kdamond of the exporter's own (on exit); the state file stays, so a
        restart in the same boot recognises them."""
        for slot in list(self.slots):
            with contextlib.suppress(DamonUnavailable):
                self.stop(slot)
        if self.slots:
            with contextlib.suppress(OSError, DamonUnavailable):
                self._save()

    def _own(self, slot: int) -> None:
        if slot not in self.slots:
            raise DamonUnavailable("foreign", f"kdamond {slot} is not the exporter's")

    # --- regions --------------------------------------------------------------------------
    def regions(self, slot: int, read: bool = True) -> list[Region]:
        """Return the regions of the exporter's running kdamond ``slot``: asks the kernel
        to update the stat scheme's tried regions (blocks about one aggregation interval)
        and reads them. Raises KdamondStopped when the kdamond is off or stops meanwhile
        (its target exited, or something else stopped it). ``read=False``: only the update
        request (returns [])."""
        self._own(slot)
        kd = self.kdamonds / str(slot)
        if self.state(slot) != "on":
            self.pids.pop(slot, None)
            raise KdamondStopped(slot, "not running")
        path = kd / "state"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        except OSError as err:
            raise _classify(path, err) from err
        try:
            os.write(fd, b"update_schemes_tried_regions")
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ECANCELED):
                self.pids.pop(slot, None)
                raise KdamondStopped(slot, f"stopped during the region update "
                                     f"({errno.errorcode.get(err.errno, err.errno)})") from err
            raise _classify(path, err) from err
        finally:
            os.close(fd)
        if not read:
            return []
        return self._read_tried(slot).regions

    def read_regions(self, slot: int) -> RegionRead:
        """Return the regions of the exporter's running kdamond ``slot`` as
        :meth:`regions` does, with the count of regions refused for unsound values."""
        self.regions(slot, read=False)
        return self._read_tried(slot)

    def read_schemes(self, slot: int) -> list[RegionRead]:
        """Return, after one region update of the exporter's running kdamond ``slot``, the
        tried regions of each of its schemes: the unfiltered one first, then one read per
        cgroup scheme (in the order of ``cgroups``) whose regions carry ``passed``."""
        self.regions(slot, read=False)
        return [self._read_tried(slot)] + [self._read_tried(slot, i, filtered=True)
                                           for i in range(1, len(self.cgroups) + 1)]

    def _read_tried(self, slot: int, scheme: int = 0, filtered: bool = False) -> RegionRead:
        """Read a stat scheme's tried regions (mm/damon/sysfs-schemes.c
        ``damon_sysfs_scheme_regions_add_dirs()``: ``tried_regions/<i>/`` numbered from 0):
        ``start``, ``end`` and ``nr_accesses`` (``age`` is not used) and, for a
        ``filtered`` scheme, ``sz_filter_passed`` (a region without it is refused), at most
        the region cap of them, each value checked."""
        base = f"{self._ctx(slot)}/schemes/{scheme}/tried_regions"
        cap = min(MAX_REGIONS_READ, max(self.settings.max_regions, 1))
        out: list[Region] = []
        refused = 0
        for i in range(cap):
            d = f"{base}/{i}"
            try:
                start = _uint(f"{d}/start", U64_MAX)
            except FileNotFoundError:
                break  # the last region was i - 1
            except OSError:
                refused += 1
                continue
            try:
                end = _uint(f"{d}/end", U64_MAX)
                acc = _uint(f"{d}/nr_accesses", U32_MAX)
                passed = _uint(f"{d}/sz_filter_passed", U64_MAX) if filtered else 0
            except OSError:
                refused += 1
                continue
            if (start is None or end is None or acc is None or passed is None
                    or end <= start):
                refused += 1
                continue
            out.append(Region(start, end, acc, passed=passed if filtered else None))
        return RegionRead(out, refused)


MAX_MEMCG_PATH = 4096  # PATH_MAX: the longest cgroup path a memcg filter is given


def _memcg_path_ok(path: object) -> bool:
    """Return whether ``path`` is a cgroup path a memcg filter may be given: a str under
    the root (``/...``), printable, no newline, at most MAX_MEMCG_PATH bytes."""
    return (isinstance(path, str) and path.startswith("/") and path.isprintable()
            and len(path.encode()) <= MAX_MEMCG_PATH)


def _filter_dir(scheme: Path) -> str:
    """Return the folder of a scheme's operations-layer filters: ``ops_filters`` (6.15+;
    a memcg filter is refused in ``core_filters``, measured on 7.3), else ``filters``."""
    return "ops_filters" if (scheme / "ops_filters").is_dir() else "filters"


# the kernel's own DAMON modules: each starts its kdamond exclusively (mm/damon/core.c
# damon_start(..., exclusive=true)), so none can start while another kdamond runs, and an
# ``enabled`` write then fails (measured on 6.12: EIO for damon_reclaim)
DAMON_MODULES = ("damon_reclaim", "damon_lru_sort", "damon_stat")


@dataclass(frozen=True, slots=True)
class DamonModule:
    """One of the kernel's DAMON modules (``/sys/module/<name>/parameters``): whether it
    is asked to run (``enabled`` Y) and its kdamond's pid (``kdamond_pid``: -1 when not
    running; None where the module has no such parameter, as damon_stat)."""

    name: str
    enabled: bool
    kdamond_pid: int | None

    @property
    def running(self) -> bool | None:
        """Return whether its kdamond runs (None: the module does not say)."""
        return None if self.kdamond_pid is None else self.kdamond_pid > 0


def damon_modules(sysfs: Path) -> list[DamonModule]:
    """Return the DAMON modules the kernel has (built in or loaded), read from
    ``module/<name>/parameters`` under ``sysfs``; a module whose ``enabled`` cannot be read
    or says neither Y nor N is left out."""
    out = []
    for name in DAMON_MODULES:
        params = sysfs / "module" / name / "parameters"
        try:
            enabled = read_small(params / "enabled", "damon").strip()
        except SourceError:
            continue
        if enabled not in (b"Y", b"N"):
            continue
        pid: int | None = None
        try:
            raw = read_small(params / "kdamond_pid", "damon").strip()
            pid = int(raw) if raw.lstrip(b"-").isdigit() and len(raw) < 12 else None
        except SourceError:
            pid = None
        out.append(DamonModule(name, enabled == b"Y", pid))
    return out


def boot_id(procfs: Path) -> str:
    """Return the kernel's boot id (``/proc/sys/kernel/random/boot_id``), "" if unreadable."""
    try:
        return read_small(procfs / "sys" / "kernel" / "random" / "boot_id",
                          "damon").decode("ascii", "replace").strip()
    except Exception:
        return ""
