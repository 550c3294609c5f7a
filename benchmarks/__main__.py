"""``python -m benchmarks``: see benchmarks/README.md."""

import sys

from benchmarks.run import main

sys.exit(main())
