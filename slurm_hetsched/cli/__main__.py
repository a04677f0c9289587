"""`python -m slurm_hetsched.cli`: the `hetsched` command without its console script."""

from __future__ import annotations

import sys

from slurm_hetsched.cli.main import main

sys.exit(main())
