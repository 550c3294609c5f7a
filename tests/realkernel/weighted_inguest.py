"""In-guest workload for test_weighted_guest.py: SIZE MiB of anonymous memory under
MPOL_WEIGHTED_INTERLEAVE (mode 6; numactl 2.0.16 has no option for it) over nodes 0-1.

    weighted_inguest.py after|before SIZE_MIB READY_FILE

``after``: the policy is set, then every page is touched (the kernel hands pages out by the
weights); ``before``: every page is touched first (default policy: the local node, CPU 0
is node 0's), then the policy is set - the pages stay where they are, which numa_maps shows
under the new policy: a deviation. Runs on CPU 0; standard library only.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time

MPOL_WEIGHTED_INTERLEAVE = 6
SYS_SET_MEMPOLICY = 238  # x86_64


def set_policy() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(0b11)
    if libc.syscall(SYS_SET_MEMPOLICY, MPOL_WEIGHTED_INTERLEAVE, ctypes.byref(mask), 64) != 0:
        raise OSError(ctypes.get_errno(), "set_mempolicy(MPOL_WEIGHTED_INTERLEAVE)")


def main() -> int:
    order, size, ready = sys.argv[1], int(sys.argv[2]) << 20, sys.argv[3]
    os.sched_setaffinity(0, {0})
    if order == "after":
        set_policy()
    m = mmap.mmap(-1, size)
    for i in range(0, size, 4096):
        m[i] = 1
    if order == "before":
        set_policy()
    with open(ready, "w") as f:
        f.write(f"pid={os.getpid()}\n")
    time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
