"""Optional compiled numa_maps scanner; without a C compiler the pure-Python one is used."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "numa_exporter.parsers._numa_maps_fast",
            ["src/numa_exporter/parsers/_numa_maps_fast.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
