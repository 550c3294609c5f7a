"""``python -m benchmarks [daemon|interference|sampled|guest|damon-guest|damon-regions|
kubelet-churn|dra|policy|paired-fleet|convergence]``: see benchmarks/README.md."""

import sys

from benchmarks import (
    convergence,
    daemon,
    damon_guest,
    damon_regions,
    dra,
    guest,
    interference,
    kubelet_churn,
    paired_fleet,
    policy_read,
    run,
    sampled,
)

COMMANDS = {"daemon": daemon.main, "interference": interference.main, "sampled": sampled.main,
            "guest": guest.main, "damon-guest": damon_guest.main,
            "damon-regions": damon_regions.main,
            "kubelet-churn": kubelet_churn.main, "dra": dra.main,
            "policy": policy_read.main, "paired-fleet": paired_fleet.main,
            "convergence": convergence.main}

if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
sys.exit(run.main())
