"""What the policies judge an allocation by: each job's rate, normalized or in steps/s.

Normalisation (Gavel, OSDI 2020): a job's rate is judged against the rate it
would get from an equal share of every type, X^equal_j = capacity_j / total capacity, so
`normalized_rate_matrix` gives a[m, j] = num_gpus[m] * T[m, j] / equal_share_rate[m]. Under the
weighted equal split (each job w_m / sum(w) of every type's GPUs) every job has normalized
rate / weight = total capacity / sum(w); that is the sharing-incentive baseline.

The policies on steps and seconds (FIFO, shortest job first, makespan, finish-time fairness)
and the linear ones (throughput, cost) read steps/s instead (`rate_matrix`, `rates`), with the
baselines they compare against: each job alone on its fastest type (`best_rate`), the weighted
equal split (`equal_split`), and the arrival order (`fifo_order`).

Heterogeneity-agnostic variants see every GPU type a job can run on as the same (`agnostic`).
No I/O.
"""

from __future__ import annotations

import numpy as np

from slurm_hetsched.core.model import Problem


def effective_throughput(problem: Problem, agnostic: bool) -> np.ndarray:
    """(n_jobs, n_types) steps/s where the job can run, 0 elsewhere.

    With `agnostic`, every runnable entry is 1.0: Gavel's heterogeneity-agnostic baselines
    see every GPU type as the same.
    """
    if agnostic:
        return problem.runnable.astype(float)
    return np.where(problem.runnable, problem.throughput, 0.0)


def equal_share_rate(problem: Problem, throughput: np.ndarray) -> np.ndarray:
    """(n_jobs,) steps/s each job gets from time fractions capacity_j / total capacity.

    Args:
        problem: for the capacities.
        throughput: (n_jobs, n_types) the throughputs to judge by (see effective_throughput).
    """
    return np.asarray(throughput @ (problem.capacity / problem.capacity.sum()))


def normalized_rate_matrix(problem: Problem, agnostic: bool = False) -> np.ndarray:
    """(n_jobs, n_types) a[m, j]: job m's normalized rate per unit of time fraction on type j.

    A job's normalized rate under x is sum_j a[m, j] * x[m, j] = num_gpus * rate / equal-share
    rate; the num_gpus factor (Gavel's scale factor) makes a job on k GPUs count k times.
    Zero where the job cannot run.
    """
    throughput = effective_throughput(problem, agnostic)
    if problem.n_jobs == 0:
        return throughput
    equal = equal_share_rate(problem, throughput)
    return np.asarray(problem.num_gpus[:, None] * throughput / equal[:, None])


def normalized_rates(problem: Problem, x: np.ndarray, agnostic: bool = False) -> np.ndarray:
    """(n_jobs,) each job's normalized rate under x (n_jobs, n_types); weights not applied."""
    return np.asarray(np.sum(normalized_rate_matrix(problem, agnostic) * x, axis=1))


def rate_matrix(problem: Problem, agnostic: bool = False) -> np.ndarray:
    """(n_jobs, n_types) steps/s for the policies whose objective is in steps or seconds.

    Heterogeneity-aware: the measured throughput where the job can run, 0 elsewhere. With
    `agnostic`, every type a job can run on counts as the same: each runnable entry is the
    job's mean throughput over those types. Gavel's agnostic baselines take every entry as 1,
    which changes nothing for scale-free objectives (max-min, FIFO) but would turn steps into
    seconds for makespan and finish-time fairness; the mean keeps the units, so on a
    homogeneous cluster an agnostic policy gives exactly the aware answer (Gavel section 4.4).
    """
    throughput = np.where(problem.runnable, problem.throughput, 0.0)
    if not agnostic or problem.n_jobs == 0:
        return throughput
    mean = throughput.sum(axis=1) / np.maximum(problem.runnable.sum(axis=1), 1)
    return np.where(problem.runnable, mean[:, None], 0.0)


def best_rate(throughput: np.ndarray) -> np.ndarray:
    """(n_jobs,) steps/s with all of a job's time on its fastest type (Gavel's X^fastest).

    Args:
        throughput: (n_jobs, n_types) from rate_matrix (0 where the job cannot run). A job
            can always spend all its time on a type it can run on: such a type has at least
            num_gpus GPUs.
    """
    return np.asarray(throughput.max(axis=1, initial=0.0))


def equal_split(problem: Problem) -> np.ndarray:
    """(n_jobs, n_types) the weighted equal split: Gavel's X^isolated ("1/n of the cluster").

    Job m gets w_m / sum(w) of every type's GPUs where it can run, that is time fraction
    share_m * capacity_j / num_gpus_m; a row summing to more than 1 is scaled down to 1. It is
    always feasible.
    """
    share = problem.weight / problem.weight.sum()
    x = share[:, None] * problem.capacity[None, :] / problem.num_gpus[:, None]
    x = np.where(problem.runnable, x, 0.0)
    return np.asarray(x / np.maximum(x.sum(axis=1, keepdims=True), 1.0))


def rates(throughput: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(n_jobs,) steps/s of each job under x: sum_j throughput[m, j] * x[m, j]."""
    return np.asarray(np.sum(throughput * x, axis=1))


def fifo_order(problem: Problem) -> np.ndarray:
    """(n_jobs,) each job's position in arrival order (arrival_s, then job id), from 0."""
    order = np.lexsort((np.array(problem.job_ids, dtype=str), problem.arrival_s))
    rank = np.empty(problem.n_jobs, dtype=np.int64)
    rank[order] = np.arange(problem.n_jobs)
    return rank
