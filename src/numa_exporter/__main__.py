"""``python -m numa_exporter``: same as the ``numa-exporter`` command."""

import sys

from numa_exporter.cli import main

sys.exit(main())
