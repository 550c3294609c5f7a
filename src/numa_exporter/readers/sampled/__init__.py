"""The sampled placement reader, in one home: ``reader.py`` (:class:`SampledReader`, the
one owner of what it keeps per process, keyed by the process's identity; the request and
settings of a read; ``sampling_available``), ``frames.py`` (a process's VMA list made
strata, from the ``maps`` text or ``PROCMAP_QUERY``), ``sparse.py`` (sparse strata narrowed
to their present runs by ``PAGEMAP_SCAN``), ``memory.py`` (a read that carries what earlier
reads learned), ``compiled.py`` + ``_sampled_fast.c`` (the compiled inner loops). The pure
estimator is ``model/sampling.py`` and ``model/sample_memory.py``; the system calls are
``sources/move_pages.py``, ``sources/pagemap_scan.py`` and ``sources/maps_query.py``.
This file imports nothing (its modules import from the package).
"""
