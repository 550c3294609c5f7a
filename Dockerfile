# syntax=docker/dockerfile:1
# numa-exporter container image. Build:   docker build -t numa-exporter:0.1.0 .
# Run (docs/deploy.md explains every option):
#   docker run -d --name numa-exporter --restart=unless-stopped \
#     --pid=host --network=host --cgroupns=host \
#     --user 0:0 --cap-drop ALL --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH \
#     --security-opt no-new-privileges --read-only --tmpfs /tmp \
#     -v /proc:/host/proc:ro -v /sys:/host/sys:ro -v /run/udev:/run/udev:ro \
#     numa-exporter:0.1.0 --path.procfs=/host/proc --path.sysfs=/host/sys
#
# The image's default user is unprivileged (uid 10061). Container runtimes do not hand
# capabilities added with --cap-add to a non-root user's processes, so as uid 10061 the
# exporter sees only host-wide counters (vmstat, numastat, node meminfo) and the processes
# of uid 10061. Reading every process's numa_maps needs CAP_SYS_PTRACE and
# CAP_DAC_READ_SEARCH in the effective set, hence `--user 0:0 --cap-drop ALL --cap-add ...`.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: the project's wheel, with the compiled numa_maps scanner --------------------
FROM ${PYTHON_IMAGE} AS builder
# gcc and the C library's headers compile the scanner (the python image carries Python's own
# headers). NUMA_EXPORTER_REQUIRE_COMPILED=1 makes setup.py fail the build when it cannot be
# compiled, instead of shipping the pure-Python fallback. Only this stage has a compiler.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
ENV NUMA_EXPORTER_REQUIRE_COMPILED=1
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY src/ src/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# --- runtime ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="numa-exporter" \
      org.opencontainers.image.description="Prometheus exporter for per-process NUMA memory placement: local vs remote bytes, drift after warm-up, page migrations" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.documentation="docs/deploy.md" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# libudev1: pyudev loads it to discover accelerators. Its version follows the base image's
# Debian release, which is what receives security fixes, so it is not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libudev1 \
 && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10061 numa-exporter \
 && useradd --system --uid 10061 --gid numa-exporter --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin numa-exporter

# The same install as outside a container: pip install of the project's wheel.
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    pip install --no-cache-dir /dist/numa_exporter-*.whl

USER 10061:10061
EXPOSE 10061

# The landing page answers as soon as the HTTP server is up. Change the port here if
# --web.listen-address is changed.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:10061/', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["numa-exporter"]
CMD ["--path.procfs=/host/proc", "--path.sysfs=/host/sys"]
