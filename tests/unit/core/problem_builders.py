"""Test builders, e.g.

make_problem([make_job("j1").gpus(2).tput(v100=4.4, k80=1.0)], v100=2, k80=4)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from slurm_hetsched.core.model import Account, Problem


@dataclass
class JobBuilder:
    job_id: str
    num_gpus: int = 1
    throughput: dict[str, float] = field(default_factory=dict)
    weight: float = 1.0
    account: str = ""
    arrival_s: float = 0.0

    def gpus(self, n: int) -> JobBuilder:
        self.num_gpus = n
        return self

    def tput(self, **per_type: float) -> JobBuilder:
        self.throughput.update(per_type)
        return self

    def w(self, weight: float) -> JobBuilder:
        self.weight = weight
        return self

    def acct(self, account: str) -> JobBuilder:
        self.account = account
        return self

    def arrives(self, arrival_s: float) -> JobBuilder:
        self.arrival_s = arrival_s
        return self


def make_job(job_id: str) -> JobBuilder:
    return JobBuilder(job_id)


def make_problem(
    jobs: Iterable[JobBuilder], accounts: Mapping[str, Account] | None = None, **gpus: int
) -> Problem:
    """A problem over the GPU types given as keyword counts, in keyword order."""
    jobs = list(jobs)
    types_ = tuple(gpus)
    return Problem(
        job_ids=tuple(j.job_id for j in jobs),
        gpu_types=types_,
        throughput=np.array([[j.throughput.get(t, 0.0) for t in types_] for j in jobs]).reshape(
            len(jobs), len(types_)
        ),
        capacity=np.array([gpus[t] for t in types_], dtype=float),
        num_gpus=np.array([j.num_gpus for j in jobs]),
        weight=np.array([j.weight for j in jobs]),
        job_accounts=tuple(j.account for j in jobs),
        accounts=dict(accounts or {}),
        arrival_s=np.array([j.arrival_s for j in jobs]),
    )


def gavel_example() -> Problem:
    """Gavel's worked example: 1 V100 + 1 K80, jobs (4, 1), (3, 1), (2, 1) steps/s."""
    return make_problem(
        [
            make_job("j0").tput(v100=4.0, k80=1.0),
            make_job("j1").tput(v100=3.0, k80=1.0),
            make_job("j2").tput(v100=2.0, k80=1.0),
        ],
        v100=1,
        k80=1,
    )
