"""Parser for ``/proc/<pid>/cgroup`` (cgroup v2, v1 and hybrid hosts).

Each line is ``hierarchy-ID:controller-list:cgroup-path``::

    0::/system.slice/foo.service            # cgroup v2 (unified) hierarchy
    4:memory:/docker/abc                    # a v1 hierarchy with one controller
    3:cpu,cpuacct:/user.slice               # a v1 hierarchy with co-mounted controllers
    1:name=systemd:/user.slice/...          # a named v1 hierarchy without controllers

The path is everything after the second colon (it may itself contain colons). Paths are
relative to the cgroup namespace of the process; one outside the reader's namespace starts
with ``/..``. Paths are decoded with ``surrogateescape`` so that any name (a delegated cgroup
may be called anything) still opens the right directory; pass them through
``_text.label_text`` before showing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from numa_exporter.parsers._kv import is_digits

UNIT_SUFFIXES = (".service", ".scope")


@dataclass(frozen=True, slots=True)
class ProcCgroup:
    """Cgroup membership of one process.

    ``v2_path`` is the path in the unified hierarchy (None when the line is absent);
    ``v1_paths`` maps each v1 controller (``memory``, ``cpuset``, ``name=systemd``, ...) to
    its path. Malformed lines are skipped and counted in ``error_count``.
    """

    v2_path: str | None = None
    v1_paths: dict[str, str] = field(default_factory=dict)
    error_count: int = 0

    def path_for(self, controller: str) -> str | None:
        """Return the v1 path of ``controller``, or the v2 path when v1 does not have it.

        On hybrid hosts a controller bound to a v1 hierarchy is found there; everything else
        lives in the unified hierarchy. Which hierarchy really serves a controller is the
        cgroup filesystem's business (see ``sources.cgroupfs``); this is the parser's guess.
        """
        return self.v1_paths.get(controller, self.v2_path)

    @property
    def systemd_path(self) -> str | None:
        """Return the path that names the systemd unit: v2's, else v1 ``name=systemd``'s."""
        if self.v2_path is not None and self.v2_path != "/":
            return self.v2_path
        return self.v1_paths.get("name=systemd", self.v2_path)

    @property
    def unit(self) -> str | None:
        """Return the systemd unit of the process (see ``systemd_unit``), or None."""
        p = self.systemd_path
        return systemd_unit(p) if p is not None else None


def parse_proc_cgroup(data: bytes) -> ProcCgroup:
    """Return the v2 path and v1 per-controller paths of a ``/proc/<pid>/cgroup`` file."""
    v2: str | None = None
    v1: dict[str, str] = {}
    errors = 0
    for raw in data.split(b"\n"):
        text = raw.decode("utf-8", "surrogateescape").strip()
        if not text:
            continue
        hid, sep1, rest = text.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not (sep1 and sep2 and is_digits(hid) and path.startswith("/")):
            errors += 1
            continue
        if hid == "0" and not controllers:
            if v2 is not None:
                errors += 1
                continue
            v2 = path
            continue
        names = [c for c in controllers.split(",") if c]
        if not names or any(c in v1 for c in names):
            errors += 1
            continue
        for c in names:
            v1[c] = path
    return ProcCgroup(v2, v1, errors)


def systemd_unit(path: str) -> str | None:
    """Return the systemd unit a cgroup path belongs to, or None outside any unit.

    That is the deepest path component ending ``.service`` or ``.scope``: a service's
    delegated sub-cgroups (``/system.slice/foo.service/payload``) still belong to
    ``foo.service``, and a container's ``docker-<id>.scope`` or
    ``cri-containerd-<id>.scope`` is its own unit. Slices are not units that run processes,
    so ``/user.slice`` and ``/`` give None.
    """
    for part in reversed(path.split("/")):
        if part.endswith(UNIT_SUFFIXES) and part.rsplit(".", 1)[0]:
            return part
    return None
