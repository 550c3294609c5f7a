"""``python -m benchmarks [daemon|interference|sampled|guest|kubelet-churn] ...``: see
benchmarks/README.md."""

import sys

from benchmarks import daemon, guest, interference, kubelet_churn, run, sampled

COMMANDS = {"daemon": daemon.main, "interference": interference.main, "sampled": sampled.main,
            "guest": guest.main, "kubelet-churn": kubelet_churn.main}

if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
sys.exit(run.main())
