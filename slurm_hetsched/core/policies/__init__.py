"""Allocation policies: each a small class with a `name`, a one-line `description` and a pure
`allocate(problem) -> Allocation`, all registered in POLICIES under Gavel's names.

Suffix convention (Gavel's): `_perf` is heterogeneity-aware; no suffix is the
heterogeneity-agnostic baseline that sees every GPU type as the same.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hetsched.core.policies.andreas import Andreas
from slurm_hetsched.core.policies.astraea import Astraea, BatchSche
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.policies.cost import (
    MaxSumThroughputNormalizedByCostPerf,
    MaxSumThroughputNormalizedByCostPerfSLOs,
)
from slurm_hetsched.core.policies.drf import DominantResourceFairness
from slurm_hetsched.core.policies.exclusive import EdfExclusive, FifoExclusive, PriorityExclusive
from slurm_hetsched.core.policies.fifo import Fifo, FifoPerf
from slurm_hetsched.core.policies.finish_time_fairness import (
    FinishTimeFairness,
    FinishTimeFairnessPerf,
)
from slurm_hetsched.core.policies.gandiva_fair import GandivaFair
from slurm_hetsched.core.policies.hadar import Hadar
from slurm_hetsched.core.policies.hived import HiveD
from slurm_hetsched.core.policies.makespan import MinTotalDuration, MinTotalDurationPerf
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairness, MaxMinFairnessPerf
from slurm_hetsched.core.policies.oasis import Oasis
from slurm_hetsched.core.policies.options import PolicyOption, parse_options
from slurm_hetsched.core.policies.packing import (
    MaxMinFairnessPacked,
    MaxMinFairnessPerfPacked,
    MinTotalDurationPacked,
    MinTotalDurationPerfPacked,
)
from slurm_hetsched.core.policies.risk_reward import RiskReward
from slurm_hetsched.core.policies.shortest_job_first import ShortestJobFirstPerf
from slurm_hetsched.core.policies.throughput import MaxSumThroughputPerf
from slurm_hetsched.core.policies.tiresias import Tiresias
from slurm_hetsched.core.policies.water_filling import (
    MaxMinFairnessWaterFilling,
    MaxMinFairnessWaterFillingPerf,
)
from slurm_hetsched.core.policies.yarn_cs import YarnCapacityScheduler
from slurm_hetsched.errors import ConfigError

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        MaxMinFairnessPerf,
        MaxMinFairness,
        MaxMinFairnessWaterFillingPerf,
        MaxMinFairnessWaterFilling,
        FifoPerf,
        Fifo,
        ShortestJobFirstPerf,
        MinTotalDurationPerf,
        MinTotalDuration,
        FinishTimeFairnessPerf,
        FinishTimeFairness,
        MaxSumThroughputPerf,
        MaxSumThroughputNormalizedByCostPerf,
        MaxSumThroughputNormalizedByCostPerfSLOs,
        MaxMinFairnessPerfPacked,
        MaxMinFairnessPacked,
        MinTotalDurationPerfPacked,
        MinTotalDurationPacked,
        Andreas,
        Hadar,
        FifoExclusive,
        EdfExclusive,
        PriorityExclusive,
        YarnCapacityScheduler,
        Tiresias,
        DominantResourceFairness,
        RiskReward,
        Oasis,
        Astraea,
        BatchSche,
        GandivaFair,
        HiveD,
    )
}


def get_policy(name: str, options: Mapping[str, object] | None = None) -> Policy:
    """A new instance of the policy registered as `name`, with `options` (its class's
    `options`, e.g. {"energy_slack": 0.1}; values may be strings such as "0.1" or "true")
    and the defaults for the rest.

    Raises:
        ConfigError: no policy has that name (the message lists every valid one), or an
            option the policy does not accept or a bad value (the message lists its options).
    """
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown policy {name!r}; valid policies are: {', '.join(sorted(POLICIES))} "
            "(`hetsched allocate --list` describes them)"
        ) from None
    kwargs = parse_options(name, cls.options, options or {})
    return cls(**kwargs)


__all__ = ["POLICIES", "Policy", "PolicyOption", "get_policy"]
