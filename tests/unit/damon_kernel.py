"""A fake DAMON sysfs (``<sysfs>/kernel/mm/damon/admin``) whose files answer writes the way
the kernel's ``mm/damon/sysfs.c`` and ``sysfs-schemes.c`` do (6.12, and 6.18 where they
differ), for the driver's tests. Regular files stand in for the attributes; ``install``
routes every ``os.write`` on one of them through :meth:`FakeDamon.store`, which does what the
kernel's store function would and rewrites the file with what its show function would print.

What is modelled (function names of mm/damon/sysfs.c):

* ``nr_kdamonds`` (``kdamonds_nr_store()``): EBUSY while any kdamond runs; otherwise every
  kdamond directory is removed and N fresh ones are made (``state`` off, ``pid`` -1, no
  context): a write wipes everyone's configuration.
* ``nr_contexts``, ``nr_targets``, ``nr_schemes``, ``nr_regions``: the numbered directories,
  with the kernel's defaults (``damon_sysfs_context_add_dirs()`` ...).
* ``state`` (``state_store()`` -> ``damon_sysfs_handle_cmd()``): ``on``
  (``damon_sysfs_turn_damon_on()``: EBUSY when running, EINVAL without exactly one context
  or, vaddr, when a target pid does not exist; ``exclusive_errno`` while another kdamond
  started exclusively runs: ``damon_start()``'s EBUSY, as DAMON_STAT's from boot answers on
  7.3, or EIO as measured on 6.12 with the modules); ``off`` (``damon_sysfs_turn_damon_off()``:
  EINVAL when never started); ``update_schemes_tried_regions`` (6.12: a request the kdamond
  serves after an aggregation interval, ECANCELED when it stops meanwhile; 6.18:
  ``damos_walk()``: EINVAL when not running, ECANCELED when stopped during the walk); any
  write while another writer holds ``damon_sysfs_lock`` (``mutex_trylock``) is EBUSY. Reads
  show ``on``/``off`` and the kdamond's pid or -1.
* a vaddr kdamond stops by itself when its target exits (``kdamond_need_stop()``).
* ``generation`` ``7.3`` (as its tree in tests/fixtures/damon_sysfs/7.3.txt, and as measured
  in the 7.3 guest): each scheme has ``filters``, ``core_filters`` and ``ops_filters``
  (``nr_filters`` makes ``<i>/{type,matching,allow,memcg_path}``, type ``anon``, ``N``,
  ``N``, empty; ``memcg`` written to a ``core_filters`` type is EINVAL) and
  ``stats/sz_ops_filter_passed``; each tried region has ``sz_filter_passed``: for a scheme
  with one memcg filter, the bytes of the region that pass it (``memcgs``: path -> the
  physical ``[start, end)`` ranges charged to it; a page the filter matches, in the memcg
  with ``matching`` Y or outside it with N, passes as its ``allow`` says, any other as the
  opposite of the last filter's ``allow``, as 6.15+ does), else 0; a scheme's tried
  regions are the regions whose ``nr_accesses`` lie in its access pattern. An ``on`` with a
  memcg filter naming a path not in ``memcgs`` fails with ENOMEM (measured on 7.3: no such
  cgroup, or one without the memory controller); a cgroup removed while the kdamond runs
  leaves it running. ``6.12``: only ``filters`` (no ``allow``), no ``sz_ops_filter_passed``,
  regions without ``sz_filter_passed``.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from numa_exporter.sources import damon as damon_mod

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
CTX_DEFAULTS = {
    "avail_operations": "vaddr\nfvaddr\npaddr", "operations": "vaddr",
    "monitoring_attrs/intervals/sample_us": "5000",
    "monitoring_attrs/intervals/aggr_us": "100000",
    "monitoring_attrs/intervals/update_us": "1000000",
    "monitoring_attrs/nr_regions/min": "10", "monitoring_attrs/nr_regions/max": "1000",
    "targets/nr_targets": "0", "schemes/nr_schemes": "0",
}


@dataclass
class Kdamond:
    """One kdamond as the kernel keeps it: running or not, its thread pid, and whether it
    was ever started (a context exists)."""

    running: bool = False
    started: bool = False
    pid: int = -1


class FakeDamon:
    """The fake kernel behind one sysfs tree; ``alive`` holds the pids that exist."""

    def __init__(self, sysfs: Path, alive: Sequence[int] = (), generation: str = "6.12"
                 ) -> None:
        self.generation = generation
        # memcg path -> the physical [start, end) ranges charged to it (7.3 filters)
        self.memcgs: dict[str, list[tuple[int, int]]] = {}
        self.admin = sysfs / "kernel" / "mm" / "damon" / "admin"
        self.kd = self.admin / "kdamonds"
        self.kd.mkdir(parents=True, exist_ok=True)
        self._put(self.kd / "nr_kdamonds", "0")
        self.kdamonds: list[Kdamond] = []
        self.alive: set[int] = set(alive)
        self.next_pid = 4242
        self.lock_held = False  # another writer holds damon_sysfs_lock
        # a kernel DAMON module's exclusive kdamond runs (DAMON_STAT from boot): an ``on``
        # fails with this errno (EBUSY; EIO) after its target was found; None: nothing runs
        self.exclusive_errno: int | None = None
        # runs while an update_schemes_tried_regions waits (the aggregation interval)
        self.during_update: Callable[[int], None] | None = None
        self.writes: list[tuple[str, str]] = []  # (path under admin, value) as stored
        # kdamond index -> what its stat scheme's next update_schemes_tried_regions writes
        self.regions: dict[int, list[tuple[int | str, ...]]] = {}
        self.empty_updates = 0  # the next this many region updates write no region
        self.updates = 0  # region updates served

    # --- what a test does from outside --------------------------------------------------
    @staticmethod
    def _put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    def exit_target(self, pid: int) -> None:
        """The process ``pid`` exits: kdamonds watching it stop (kdamond_need_stop())."""
        self.alive.discard(pid)
        for i, k in enumerate(self.kdamonds):
            if k.running and self._target(i) == pid:
                self.stop(i)

    def stop(self, i: int) -> None:
        """Stop kdamond ``i`` as an outside ``off`` (or a kernel error) does."""
        k = self.kdamonds[i]
        k.running, k.pid = False, -1
        self._show(i)

    def set_regions(self, i: int, regions: Sequence[tuple[int | str, ...]]) -> None:
        """Set what the next update_schemes_tried_regions of kdamond ``i`` writes out:
        (start, end, nr_accesses, age) each; a str is written as it is (hostile values)."""
        self.regions[i] = [tuple(r) for r in regions]

    # --- the kernel's side ----------------------------------------------------------------
    def _dir(self, i: int) -> Path:
        return self.kd / str(i)

    def _target(self, i: int) -> int | None:
        p = self._dir(i) / "contexts/0/targets/0/pid_target"
        try:
            return int(p.read_text())
        except (OSError, ValueError):
            return None

    def _show(self, i: int) -> None:
        k = self.kdamonds[i]
        self._put(self._dir(i) / "state", "on" if k.running else "off")
        self._put(self._dir(i) / "pid", str(k.pid))

    def _mkdirs(self, base: Path, n: int, make: Callable[[Path], None]) -> None:
        for old in base.iterdir():
            if old.is_dir() and old.name.isdigit():
                shutil.rmtree(old)
        for j in range(n):
            make(base / str(j))

    def _make_ctx(self, d: Path) -> None:
        for rel, text in CTX_DEFAULTS.items():
            self._put(d / rel, text)

    def _make_target(self, d: Path) -> None:
        self._put(d / "pid_target", "0")
        self._put(d / "regions/nr_regions", "0")

    def _make_scheme(self, d: Path) -> None:
        self._put(d / "action", "pageout")
        for name, hi in (("sz", U64_MAX), ("nr_accesses", U32_MAX), ("age", U32_MAX)):
            self._put(d / "access_pattern" / name / "min", "0")
            self._put(d / "access_pattern" / name / "max", str(hi))
        (d / "tried_regions").mkdir(parents=True, exist_ok=True)
        self._put(d / "tried_regions/total_bytes", "0")
        self._put(d / "stats/nr_tried", "0")
        dirs = ("filters",)
        if self.generation != "6.12":
            self._put(d / "stats/sz_ops_filter_passed", "0")
            dirs = ("filters", "core_filters", "ops_filters")
        for name in dirs:
            self._put(d / name / "nr_filters", "0")

    def _make_filter(self, d: Path) -> None:
        for name, text in (("type", "anon"), ("matching", "N"), ("memcg_path", "")):
            self._put(d / name, text)
        if self.generation != "6.12":
            self._put(d / "allow", "N")

    def _running_any(self) -> bool:
        return any(k.running for k in self.kdamonds)

    def store(self, rel: str, value: str) -> None:
        """Handle one write of ``value`` to ``rel`` (under admin/kdamonds) as the kernel's
        store function would; raise OSError with its errno where it fails."""
        if self.lock_held:
            raise OSError(errno.EBUSY, "Device or resource busy")  # mutex_trylock failed
        parts = rel.split("/")
        v = value.strip()
        if parts == ["nr_kdamonds"]:
            if self._running_any():
                raise OSError(errno.EBUSY, "Device or resource busy")
            n = int(v)
            self._mkdirs(self.kd, n, lambda d: None)
            self.kdamonds = [Kdamond() for _ in range(n)]
            for i in range(n):
                self._show(i)
                self._put(self._dir(i) / "contexts/nr_contexts", "0")
            self._put(self.kd / rel, v)
            return
        i = int(parts[0])
        tail = "/".join(parts[1:])
        if tail == "contexts/nr_contexts":
            self._mkdirs(self._dir(i) / "contexts", int(v), self._make_ctx)
        elif tail.endswith("targets/nr_targets"):
            self._mkdirs(self._dir(i) / "contexts/0/targets", int(v), self._make_target)
        elif tail.endswith("schemes/nr_schemes"):
            self._mkdirs(self._dir(i) / "contexts/0/schemes", int(v), self._make_scheme)
        elif tail.endswith("/nr_filters"):
            self._mkdirs((self.kd / rel).parent, int(v), self._make_filter)
        elif "/core_filters/" in tail and tail.endswith("/type") and v == "memcg":
            raise OSError(errno.EINVAL, "Invalid argument")  # a core layer filter type only
        elif tail.endswith("regions/nr_regions"):
            base = self._dir(i) / "contexts/0/targets/0/regions"

            def region(d: Path) -> None:
                self._put(d / "start", "0")
                self._put(d / "end", "0")
            self._mkdirs(base, int(v), region)
        elif tail == "state":
            self._state(i, v)
            self._show(i)
            return
        self._put(self.kd / rel, v)  # what the attribute's show function prints

    def _state(self, i: int, cmd: str) -> None:
        k = self.kdamonds[i]
        if cmd == "on":
            if k.running:
                raise OSError(errno.EBUSY, "Device or resource busy")
            if int((self._dir(i) / "contexts/nr_contexts").read_text()) != 1:
                raise OSError(errno.EINVAL, "Invalid argument")
            ops = (self._dir(i) / "contexts/0/operations").read_text().strip()
            if ops == "vaddr" and self._target(i) not in self.alive:
                raise OSError(errno.EINVAL, "Invalid argument")  # find_get_pid() failed
            for memcg in self._filters(i).values():
                if memcg is not None and memcg[0] not in self.memcgs:
                    raise OSError(errno.ENOMEM, "Cannot allocate memory")  # no such memcg
            if self.exclusive_errno is not None:  # damon_start(): an exclusive ctx runs
                raise OSError(self.exclusive_errno, os.strerror(self.exclusive_errno))
            k.running = k.started = True
            k.pid, self.next_pid = self.next_pid, self.next_pid + 1
        elif cmd == "off":
            if not k.started:
                raise OSError(errno.EINVAL, "Invalid argument")
            k.running, k.pid = False, -1
        elif cmd == "update_schemes_tried_regions":
            if not k.running:
                raise OSError(errno.EINVAL, "Invalid argument")
            if self.during_update is not None:
                self.during_update(i)
            if not k.running:  # stopped during the wait: the request is cancelled
                raise OSError(errno.ECANCELED, "Operation canceled")
            self._tried(i)
        else:
            raise OSError(errno.EINVAL, "Invalid argument")

    def _filters(self, i: int) -> dict[int, tuple[str, bool, bool] | None]:
        """Return scheme index -> (memcg path, matching, allow) of its one memcg filter
        (None: none)."""
        schemes = self._dir(i) / "contexts/0/schemes"
        out: dict[int, tuple[str, bool, bool] | None] = {}
        for d in sorted((p for p in schemes.iterdir() if p.name.isdigit()),
                        key=lambda p: int(p.name)):
            found = None
            for name in ("filters", "ops_filters"):
                f = d / name / "0"
                if (f / "type").exists() and (f / "type").read_text().strip() == "memcg":
                    found = ((f / "memcg_path").read_text().strip(),
                             (f / "matching").read_text().strip() == "Y",
                             (f / "allow").exists()
                             and (f / "allow").read_text().strip() == "Y")
            out[int(d.name)] = found
        return out

    def _passed(self, memcg: tuple[str, bool, bool] | None, start: int, end: int) -> int:
        """Return the bytes of [start, end) that pass the scheme's memcg filter (0 without
        one; the region's bytes outside the memcg count as other memcgs' pages)."""
        if memcg is None:
            return 0
        path, matching, allow = memcg
        inside = sum(max(0, min(end, hi) - max(start, lo))
                     for lo, hi in self.memcgs.get(path, []))
        outside = (end - start) - inside
        default = not allow  # 6.15+: pages no filter matched
        return ((inside if (allow if matching else default) else 0)
                + (outside if (default if matching else allow) else 0))

    def _tried(self, i: int) -> None:
        regions = self.regions.get(i, [])
        if self.empty_updates > 0:
            self.empty_updates -= 1
            regions = []
        self.updates += 1
        schemes = self._dir(i) / "contexts/0/schemes"
        for n, memcg in self._filters(i).items():
            scheme = schemes / str(n)
            base = scheme / "tried_regions"
            for old in base.iterdir():
                if old.is_dir():
                    shutil.rmtree(old)
            lo = int((scheme / "access_pattern/nr_accesses/min").read_text())
            hi = int((scheme / "access_pattern/nr_accesses/max").read_text())
            total = j = 0
            for start, end, acc, age in regions:
                if isinstance(acc, int) and not lo <= acc <= hi:
                    continue
                d = base / str(j)
                d.mkdir()
                j += 1
                values: list[tuple[str, object]] = [
                    ("start", start), ("end", end), ("nr_accesses", acc), ("age", age)]
                if self.generation != "6.12":
                    passed = (self._passed(memcg, start, end)
                              if isinstance(start, int) and isinstance(end, int) else 0)
                    values.append(("sz_filter_passed", passed))
                for name, val in values:
                    (d / name).write_text(f"{val}\n")
                if isinstance(start, int) and isinstance(end, int):
                    total += max(0, end - start)
            self._put(base / "total_bytes", str(total))

    # --- plumbing -------------------------------------------------------------------------
    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Route writes to files under this tree through :meth:`store` (and, as the kernel
        does, keep a failed write from changing what the file shows)."""
        real = os.write
        root = str(self.kd) + "/"

        def write(fd: int, data: bytes) -> int:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return real(fd, data)
            if not path.startswith(root):
                return real(fd, data)
            rel = path[len(root):]
            value = bytes(data).decode()
            self.writes.append((rel, value))
            before = _prior.get(path, b"")
            try:
                self.store(rel, value)
            except OSError:
                with open(path, "wb") as f:  # the open truncated it; the kernel kept it
                    f.write(before)
                raise
            return len(data)

        _prior: dict[str, bytes] = {}
        real_open = os.open

        def open_(path: object, flags: int, *args: object, **kw: object) -> int:
            p = os.fspath(path)  # type: ignore[call-overload]
            if isinstance(p, str) and p.startswith(root) and flags & os.O_WRONLY:
                try:
                    with open(p, "rb") as f:
                        _prior[p] = f.read()
                except OSError:
                    pass
            return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(damon_mod.os, "write", write)
        monkeypatch.setattr(damon_mod.os, "open", open_)
