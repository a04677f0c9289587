"""The shared vocabulary of the decision core: immutable value types, one module per group.

- `cluster`: `GpuType`, `Node`, `Job`, `ClusterSnapshot` (what the cluster looks like);
- `placement`: `GpuSlice`, `Placement` (where one job runs for one round);
- `accounts`: `Account`, `AccountPolicy` (tenants: weights, quotas of GPUs);
- `payment`: `Payment`, `POOL_OWNER` (what a borrowing job pays a round, and to whom);
- `energy`: `EnergyModel`, `SiteEnergy` (the power model);
- `problem`: `Problem` (what every policy receives) and `PackedPairs`;
- `allocation`: `Allocation` (what a policy returns: time fractions per job and GPU type);
- `reservation`: `Reservation`, `Stretch` (an admitted job's schedule over time slots, OASiS);
- `rounds`: `RoundState` (what the round mechanism carries between rounds) and `RoundPlan`
  (one round's actions: keep, move, start, stop);
- `frozen`: the checked, read-only field values they share and `InvalidProblemError`.

Import them from here: `from slurm_hetsched.core.model import Problem`.

Conventions, fixed here once:
- GPU types are data (Slurm GRES type strings such as "v100"), never a list in code.
- Row order of every per-job array is `job_ids`; column order is `gpu_types`.
- Times are seconds on one clock chosen by the caller (`Problem.now_s`); the core never reads it.
- Arrays are copied and made read-only on construction, so a frozen value stays frozen.

This package does no I/O.
"""

from __future__ import annotations

from slurm_hetsched.core.model.accounts import Account, AccountPolicy
from slurm_hetsched.core.model.allocation import Allocation
from slurm_hetsched.core.model.cluster import ClusterSnapshot, GpuType, Job, Node
from slurm_hetsched.core.model.energy import EnergyModel, SiteEnergy
from slurm_hetsched.core.model.frozen import InvalidProblemError
from slurm_hetsched.core.model.payment import POOL_OWNER, Payment
from slurm_hetsched.core.model.placement import GpuSlice, Placement
from slurm_hetsched.core.model.problem import SUBLINEAR_EXPONENT, PackedPairs, Problem
from slurm_hetsched.core.model.reservation import Reservation, Stretch
from slurm_hetsched.core.model.rounds import RoundPlan, RoundState

__all__ = [
    "POOL_OWNER",
    "SUBLINEAR_EXPONENT",
    "Account",
    "AccountPolicy",
    "Allocation",
    "ClusterSnapshot",
    "EnergyModel",
    "GpuSlice",
    "GpuType",
    "InvalidProblemError",
    "Job",
    "Node",
    "PackedPairs",
    "Payment",
    "Placement",
    "Problem",
    "Reservation",
    "RoundPlan",
    "RoundState",
    "SiteEnergy",
    "Stretch",
]
