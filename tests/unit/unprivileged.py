"""Checking that a source raises Denied on a mode-0 file, which root would read anyway."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def raises_denied(import_line: str, call: str, root: Path) -> bool:
    """Return whether ``call`` raises ``Denied`` in a fresh interpreter, run as nobody when
    the tests run as root (CI). ``import_line`` imports what ``call`` uses; ``call`` sees
    the folder ``root`` as ``Path(sys.argv[1])``, which nobody must be able to enter."""
    code = ("import sys; from pathlib import Path\n"
            f"{import_line}\n"
            "from numa_exporter.sources.errors import Denied\n"
            f"try:\n    {call}\n"
            "except Denied:\n    sys.exit(0)\nsys.exit(3)\n")
    cmd = [sys.executable, "-c", code, str(root)]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    return subprocess.run(cmd, check=False, timeout=60).returncode == 0
