"""Which accelerators each process uses, and which home nodes the config pins for it."""

from __future__ import annotations

import structlog

from numa_exporter.config import Config
from numa_exporter.model.snapshot import AcceleratorDevice, AcceleratorUse
from numa_exporter.readers.accelerators import (
    Accelerator,
    AcceleratorSource,
    FixtureAcceleratorSource,
    UdevAcceleratorSource,
)
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import Absent, Gone, SourceError
from numa_exporter.sources.process_fds import DeviceFd
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

log = structlog.get_logger()


class AcceleratorMap:
    """The machine's accelerators (re-listed on topology changes) and per-process lookups."""

    def __init__(self, source: AcceleratorSource | None, config: Config, proc: ProcFS,
                 errors: ErrorReporter) -> None:
        self.source = source
        self.config = config
        self.errors = errors
        self.devices: tuple[Accelerator, ...] = ()
        self._by_pci: dict[str, Accelerator] = {}
        # fixture trees hold plain links such as 3 -> /dev/nvidia0: stat would follow them to
        # this machine's own /dev and make results depend on the machine
        self._stat_rdev = proc.is_live()

    def refresh(self) -> tuple[Accelerator, ...]:
        """Return the accelerators discovered anew (none when discovery fails, logged)."""
        if self.source is None:
            return ()
        try:
            self.devices = self.source.discover()
        except Exception as err:  # udev unavailable or a broken fixture: keep serving
            log.warning("accelerator discovery failed", error=str(err))
            self.devices = ()
        self._by_pci = {a.pci_address: a for a in self.devices}
        return self.devices

    def exported(self) -> tuple[AcceleratorDevice, ...]:
        """Return the accelerators as snapshot values."""
        return tuple(AcceleratorDevice(a.device, a.pci_address, a.vendor, a.driver, a.node)
                     for a in self.devices)

    def uses(self, files: ProcessFiles, texts: tuple[str, ...], deadline: Deadline = NEVER
             ) -> tuple[AcceleratorUse, ...]:
        """Return the accelerators a process has open (read through ``files``, a zombie
        leader's through its live thread), plus those pinned to it by config.

        Raises Gone when the process vanished and ``Expired`` past ``deadline``; any other
        failed read of its open files (denied, absent, failing) is counted in the error
        reporter and the pins alone are returned.
        """
        found: dict[str, Accelerator] = {}
        for pin in self.config.accelerator_pins:
            if any(pin.match.search(t) for t in texts if t):
                for addr in pin.pci_addresses:
                    a = self._by_pci.get(addr.lower())
                    if a is not None:
                        found[a.pci_address] = a
        if self.source is not None and self.devices:
            fds: tuple[DeviceFd, ...]
            try:
                fds = files.fds(stat_rdev=self._stat_rdev, deadline=deadline)
            except Absent:
                fds = ()  # the process is there without an fd folder (a partial tree)
            except Gone:
                raise
            except SourceError as err:
                self.errors.read(err)
                fds = ()
            for fd in fds:
                a = None
                if fd.rdev is not None:
                    a = self.source.device_for_rdev("char", *fd.rdev)
                if a is None:
                    a = self.source.device_for_devname(fd.path)
                if a is not None:
                    found[a.pci_address] = a
        return tuple(AcceleratorUse(a.device, a.pci_address, a.node, a.local_cpus)
                     for _, a in sorted(found.items()))


def pinned_home(config: Config, texts: tuple[str, ...]) -> frozenset[int] | None:
    """Return the home nodes the config file pins for a process with these comm/cmdline."""
    for pin in config.home_pins:
        if any(pin.match.search(t) for t in texts if t):
            return pin.nodes
    return None


def accelerator_source(config: Config) -> AcceleratorSource | None:
    """Return the accelerator source the config asks for (None when udev is unusable)."""
    if not config.enabled("accelerator"):
        return None
    if config.accelerator_records is not None:
        return FixtureAcceleratorSource(config.accelerator_records, config.roots.procfs,
                                        include_rdma=config.accelerator_rdma)
    try:
        return UdevAcceleratorSource(config.roots.procfs, config.roots.sysfs,
                                     include_rdma=config.accelerator_rdma)
    except Exception as err:  # no libudev in a slim container: run without accelerators
        log.warning("udev unavailable; accelerators not discovered", error=str(err))
        return None
