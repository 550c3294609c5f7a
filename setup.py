"""Optional compiled numa_maps scanner, sampled-placement loops and kubelet checksum helpers;
without a C compiler the pure-Python ones are used.

With NUMA_EXPORTER_REQUIRE_COMPILED=1 in the environment the scanner is required: a build
that cannot compile it fails instead of falling back to the slower pure-Python scanner (the
container image's builder stage sets it, so that the image always ships the compiled one).
"""

import os

from setuptools import Extension, setup

REQUIRED = os.environ.get("NUMA_EXPORTER_REQUIRE_COMPILED") == "1"

setup(
    ext_modules=[
        Extension(
            "numa_exporter.parsers._numa_maps_fast",
            ["src/numa_exporter/parsers/_numa_maps_fast.c"],
            extra_compile_args=["-O2"],
            optional=not REQUIRED,
        ),
        Extension(
            "numa_exporter.parsers.kubelet._kubelet_fast",
            ["src/numa_exporter/parsers/kubelet/_kubelet_fast.c"],
            extra_compile_args=["-O2"],
            optional=not REQUIRED,
        ),
        Extension(
            "numa_exporter.readers.sampled._sampled_fast",
            ["src/numa_exporter/readers/sampled/_sampled_fast.c"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=not REQUIRED,
        ),
    ]
)
