"""Topology hot-plug watch: a udev monitor thread calling back on PCI, CPU, memory and node
uevents (the sampler then rereads the topology and the accelerators)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import structlog

log = structlog.get_logger("numa_exporter.sources.topology_watch")

TOPOLOGY_SUBSYSTEMS = ("pci", "cpu", "memory", "node")
TOPOLOGY_ACTIONS = frozenset({"add", "remove", "change", "online", "offline", "bind", "unbind"})


@dataclass(frozen=True, slots=True)
class TopologyEvent:
    """A uevent of a PCI device, CPU, memory block or NUMA node."""

    action: str
    subsystem: str
    sys_name: str
    device_path: str


class TopologyWatch:
    """A running udev monitor thread; ``stop()`` ends it within about a second."""

    def __init__(self, monitor: Any, callback: Callable[[TopologyEvent], None],
                 poll_seconds: float = 1.0) -> None:
        self._monitor = monitor
        self._callback = callback
        self._poll = poll_seconds
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="numa-topology-watch",
                                       daemon=True)

    def start(self) -> TopologyWatch:
        """Start the thread and return self."""
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end and wait up to ``timeout`` seconds for it."""
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    @property
    def running(self) -> bool:
        """Return whether the monitor thread is alive."""
        return self.thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                dev = self._monitor.poll(timeout=self._poll)
            except Exception:
                log.exception("udev monitor failed; topology changes are no longer watched")
                return
            if dev is None:
                continue
            try:
                event = TopologyEvent(str(dev.action or ""), str(dev.subsystem or ""),
                                      str(dev.sys_name or ""), str(dev.device_path or ""))
            except LookupError:
                continue
            if event.action not in TOPOLOGY_ACTIONS:
                continue
            try:
                self._callback(event)
            except Exception:
                log.exception("topology callback failed", action=event.action,
                              subsystem=event.subsystem, sys_name=event.sys_name)


def watch_topology(callback: Callable[[TopologyEvent], None], *, context: Any = None,
                   source: Literal["udev", "kernel"] = "udev",
                   subsystems: tuple[str, ...] = TOPOLOGY_SUBSYSTEMS,
                   poll_seconds: float = 1.0) -> TopologyWatch | None:
    """Return a started watch calling ``callback`` on topology uevents, or None.

    Events are add, remove, change, online, offline, bind and unbind of devices in
    ``subsystems`` (PCI hotplug and driver changes, CPU and memory hotplug, node changes).
    ``source="udev"`` receives events after udevd processed them (needs a running udevd);
    ``"kernel"`` receives the kernel's raw uevents. When netlink is unavailable (no
    permission, a sandbox, no libudev) the reason is logged and None returned: the exporter
    then only sees changes at its next full rescan. The callback runs in the watch thread;
    its exceptions are logged, not raised.
    """
    try:
        import pyudev

        ctx = context if context is not None else pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(ctx, source=source)
        for sub in subsystems:
            monitor.filter_by(sub)
        monitor.start()
    except Exception as err:  # OSError, ImportError, ValueError: no netlink here
        log.warning("cannot watch udev topology events", error=str(err), source=source)
        return None
    return TopologyWatch(monitor, callback, poll_seconds).start()
