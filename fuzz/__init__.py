"""Coverage-guided fuzzing of every parser with atheris (libFuzzer).

    .venv/bin/python -m fuzz numa_maps --time 600     # one target, ten minutes
    .venv/bin/python -m fuzz all --runs 20000         # every target in turn, fixed inputs
    .venv/bin/python -m fuzz --list

See ``fuzz/README.md``. Targets live in ``fuzz/targets.py``.
"""
