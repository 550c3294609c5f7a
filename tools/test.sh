#!/usr/bin/env bash
# Installs everything the test suite needs (Debian packages, a virtualenv with the project and
# its dev extras) and runs the whole suite (pyproject's testpaths: every directory under tests/):
# parser and collector tests on fixture roots, the live tier (tests/live/: real processes on
# this machine's kernel),
# end-to-end runs of the real daemon over HTTP, a real Prometheus/promtool, and the real-kernel
# tier (2- and 4-node Linux guests under QEMU).
#   bash tools/test.sh            # everything
#   bash tools/test.sh -m 'not realkernel'   # extra pytest arguments are passed through
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc, python3-dev: the compiled numa_maps scanner (optional for users, built and tested here);
# zstd: unpacks the 6.12 guest kernel (zstd-compressed) for the real-kernel tier
APT_PACKAGES=(prometheus qemu-system-x86 busybox-static numactl cpio systemd curl procps python3-venv
              apache2-utils iproute2 openssl gcc python3-dev zstd)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "installing Debian packages: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev]'

.venv/bin/ruff check src tests
.venv/bin/mypy
# the compiled scanner must have been built, so that both scanners are tested
export NUMA_EXPORTER_REQUIRE_COMPILED=1
exec .venv/bin/python -m pytest "$@"
