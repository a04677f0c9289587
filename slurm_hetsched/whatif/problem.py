"""The what-if problem JSON -> the core's Problem (`parse_problem`; docs/interfaces.md).

Parsing is strict: unknown keys are rejected with the valid ones listed, and every error names
the job, GPU type or key at fault. The jobs' steps/s come from whatif/rates.py, the checks of
single fields from whatif/fields.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from slurm_hetsched.core.catalog import merge_gpu_types, parse_gpu_types, parse_site_energy
from slurm_hetsched.core.costs import EnergyModel, SiteEnergy
from slurm_hetsched.core.model import (
    Account,
    AccountPolicy,
    GpuSlice,
    GpuType,
    InvalidProblemError,
    Node,
    Placement,
    Problem,
)
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.prior import with_estimates
from slurm_hetsched.core.utility import Utility, default_utility
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.whatif.fields import (
    check_keys,
    check_types,
    non_negative,
    number_at,
    object_at,
    utility_at,
    whole_count,
)
from slurm_hetsched.whatif.rates import (
    packed_pairs,
    throughput_at,
    throughput_row,
    with_table_pairs,
)

_PROBLEM_KEYS = {"gpus", "nodes", "jobs", "accounts", "gpu_types", "policy_options"}
_JOB_KEYS = {
    "id",
    "throughput",
    "class",
    "num_gpus",
    "scale_factor",
    "weight",
    "account",
    "arrival_s",
    "steps",
    "due_s",
    "tardiness_weight",
    "slo_s",
    "time_received_s",
    "packed",
    "allowed_gpus",
    "running_on",
    "utility",
    "preempt",
}
_NODE_KEYS = {"name", "gpus", "gpus_in_use", "available"}
_SLICE_KEYS = {"node", "type", "count"}
_ACCOUNT_KEYS = {"weight", "policy", "quota"}


def _catalog(data: Mapping[str, Any]) -> tuple[dict[str, GpuType], SiteEnergy]:
    """The shipped GPU types and site energy with the problem's `gpu_types` over them."""
    catalog = shipped_gpu_types()
    site = shipped_site_energy()
    if "gpu_types" in data:
        overrides = object_at(data, "gpu_types", "problem")
        catalog = merge_gpu_types(catalog, parse_gpu_types(overrides))
        site = parse_site_energy(overrides, base=site)
    return catalog, site


def decision_table(data: Mapping[str, Any], table: ThroughputTable | None) -> ThroughputTable:
    """The table jobs given by `class` are read from: `table` (default the shipped one) with
    estimates for the types it lacks and a neutral row for classes it does not know, from the
    figures of the shipped GPU types and the problem's own `gpu_types`
    (core/throughput/prior.py)."""
    catalog, _ = _catalog(data)
    return with_estimates(table or shipped_throughputs(), catalog)


def parse_problem(data: Mapping[str, Any], table: ThroughputTable | None = None) -> Problem:
    """The what-if JSON -> a Problem (see run_allocate). Raises InvalidProblemError."""
    check_keys(data, _PROBLEM_KEYS, "problem")
    gpu_types, capacity, nodes = _capacity(data)
    jobs = data.get("jobs")
    if not isinstance(jobs, list) or not all(isinstance(j, Mapping) for j in jobs):
        raise InvalidProblemError("problem: `jobs` must be a list of objects")
    for job in jobs:
        check_keys(job, _JOB_KEYS, f"job {job.get('id', '?')!r}")
    ids = tuple(_job_id(job) for job in jobs)
    allowed = [_allowed_gpus(job) for job in jobs]
    num_gpus = np.array(
        [_num_gpus(job, a) for job, a in zip(jobs, allowed, strict=True)], dtype=np.int64
    )
    catalog, site = _catalog(data)
    table = decision_table(data, table)
    throughput = np.array(
        [throughput_row(job, n, gpu_types, table) for job, n in zip(jobs, num_gpus, strict=True)]
    ).reshape(len(jobs), len(gpu_types))
    prices = [catalog[t].price_per_hour if t in catalog else None for t in gpu_types]
    any_allowed = any(a is not None for a in allowed)
    due_s = _optional_column(jobs, "due_s", fill=math.nan)
    tardiness_weight = _optional_column(jobs, "tardiness_weight", fill=0.0, minimum=0.0)
    return Problem(
        job_ids=ids,
        gpu_types=gpu_types,
        throughput=throughput,
        capacity=capacity,
        num_gpus=num_gpus,
        weight=np.array([number_at(job, "weight", 1.0, positive=True) for job in jobs]),
        job_accounts=tuple(str(job.get("account", "")) for job in jobs),
        accounts=_accounts(data),
        arrival_s=np.array([number_at(job, "arrival_s", 0.0) for job in jobs]),
        steps=_optional_column(jobs, "steps", minimum=0.0),
        due_s=due_s,
        tardiness_weight=tardiness_weight,
        slo_s=_optional_column(jobs, "slo_s", fill=math.inf, positive=True),
        received_s=_received(jobs, gpu_types),
        packed=with_table_pairs(
            packed_pairs(jobs, ids, gpu_types), jobs, num_gpus, gpu_types, table
        ),
        price_per_hour=None if None in prices else np.array(prices, dtype=float),
        nodes=nodes,
        running=_running(jobs, nodes),
        allowed_gpus=(
            tuple(a or (int(n),) for a, n in zip(allowed, num_gpus, strict=True))
            if any_allowed
            else None
        ),
        throughput_at=throughput_at(jobs, allowed, gpu_types, table) if any_allowed else None,
        energy=EnergyModel.from_catalog(catalog, site, gpu_types),
        utilities=_utilities(jobs, due_s, tardiness_weight),
        preemptible=_preemptible(jobs),
    )


# ----------------------------------------------------------------------------------------------
# Pieces of the problem


def _capacity(data: Mapping[str, Any]) -> tuple[tuple[str, ...], np.ndarray, tuple[Node, ...]]:
    """(GPU types in file order, (n_types,) free GPUs, the nodes or ()) from `gpus` or `nodes`."""
    if ("gpus" in data) == ("nodes" in data):
        raise InvalidProblemError("problem: give exactly one of `gpus` and `nodes`")
    if "gpus" in data:
        gpus = object_at(data, "gpus", "problem")
        types_ = tuple(gpus)
        counts = [whole_count(gpus[t], f"gpus / {t!r}") for t in types_]
        return types_, np.array(counts, dtype=float), ()
    nodes_json = data["nodes"]
    if not isinstance(nodes_json, list):
        raise InvalidProblemError("problem: `nodes` must be a list of objects")
    nodes = []
    for raw in nodes_json:
        if not isinstance(raw, Mapping):
            raise InvalidProblemError("problem: `nodes` must be a list of objects")
        check_keys(raw, _NODE_KEYS, f"node {raw.get('name', '?')!r}")
        where = f"node {raw.get('name', '?')!r}"
        gpus = {
            t: whole_count(c, f"{where} / gpus / {t!r}")
            for t, c in object_at(raw, "gpus", where).items()
        }
        in_use = {
            t: whole_count(c, f"{where} / gpus_in_use / {t!r}")
            for t, c in object_at(raw, "gpus_in_use", where, required=False).items()
        }
        nodes.append(
            Node(str(raw.get("name", "")), gpus, in_use, available=bool(raw.get("available", True)))
        )
    types_ = tuple(dict.fromkeys(t for node in nodes for t in node.gpus))
    capacity = np.array([sum(node.free_gpus(t) for node in nodes) for t in types_], dtype=float)
    return types_, capacity, tuple(nodes)


def _job_id(job: Mapping[str, Any]) -> str:
    job_id = job.get("id")
    if not isinstance(job_id, str) or not job_id:
        raise InvalidProblemError(f"job {job_id!r}: `id` must be a non-empty string")
    return job_id


def _num_gpus(job: Mapping[str, Any], allowed: tuple[int, ...] | None = None) -> int:
    where = f"job {job['id']!r}"
    values = {k: job[k] for k in ("num_gpus", "scale_factor") if k in job}
    counts = {k: whole_count(v, f"{where} / {k}") for k, v in values.items()}
    if len(set(counts.values())) > 1:
        raise InvalidProblemError(f"{where}: num_gpus and scale_factor disagree: {counts}")
    count = next(iter(counts.values()), 1 if allowed is None else allowed[0])
    if count < 1:
        raise InvalidProblemError(f"{where}: num_gpus must be >= 1, got {count}")
    if allowed is not None and count != allowed[0]:
        raise InvalidProblemError(
            f"{where}: num_gpus {count} must be the smallest of allowed_gpus {list(allowed)} "
            "(or leave num_gpus out)"
        )
    return count


def _allowed_gpus(job: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The job's `allowed_gpus` (GPU counts a placement policy may choose from), ascending."""
    if "allowed_gpus" not in job:
        return None
    where = f"job {job['id']!r} / allowed_gpus"
    raw = job["allowed_gpus"]
    if not isinstance(raw, list) or not raw:
        raise InvalidProblemError(f"{where}: expected a non-empty list of GPU counts, got {raw!r}")
    counts = sorted({whole_count(v, where) for v in raw})
    if counts[0] < 1:
        raise InvalidProblemError(f"{where}: GPU counts must be >= 1, got {raw!r}")
    return tuple(counts)


def _running(jobs: list[Mapping[str, Any]], nodes: tuple[Node, ...]) -> dict[str, Placement]:
    """Each job's `running_on` ([{"node", "type", "count"}]): where it runs now."""
    running = {}
    for job in jobs:
        if "running_on" not in job:
            continue
        where = f"job {job['id']!r} / running_on"
        if not nodes:
            raise InvalidProblemError(f"{where}: needs a problem with `nodes`")
        raw = job["running_on"]
        if not isinstance(raw, list) or not raw or not all(isinstance(s, Mapping) for s in raw):
            raise InvalidProblemError(f"{where}: expected [{{node, type, count}}, ...]")
        slices = []
        for piece in raw:
            check_keys(piece, _SLICE_KEYS, where)
            missing = sorted(_SLICE_KEYS - set(piece))
            if missing:
                raise InvalidProblemError(f"{where}: missing key(s) {missing}")
            count = whole_count(piece["count"], f"{where} / count")
            slices.append(GpuSlice(str(piece["node"]), str(piece["type"]), count))
        running[str(job["id"])] = Placement(str(job["id"]), tuple(slices))
    return running


def _accounts(data: Mapping[str, Any]) -> dict[str, Account]:
    accounts = {}
    for name, raw in object_at(data, "accounts", "problem", required=False).items():
        where = f"account {name!r}"
        if not isinstance(raw, Mapping):
            raise InvalidProblemError(f"{where}: must be an object with `weight`, `policy`")
        check_keys(raw, _ACCOUNT_KEYS, where)
        policy = raw.get("policy", "fair")
        valid = [p.value for p in AccountPolicy]
        if policy not in valid:
            raise InvalidProblemError(f"{where}: policy {policy!r}; expected one of {valid}")
        weight = number_at(raw, "weight", 1.0, positive=True, where=where)
        quota = object_at(raw, "quota", where, required=False)
        counts = {str(t): whole_count(n, f"{where} / quota / {t}") for t, n in quota.items()}
        accounts[name] = Account(name, weight, AccountPolicy(policy), counts)
    return accounts


def _preemptible(jobs: list[Mapping[str, Any]]) -> tuple[bool, ...] | None:
    """`"preempt": false` per job (it cannot be checkpointed); None when every job can be."""
    flags = []
    for job in jobs:
        flag = job.get("preempt", True)
        if not isinstance(flag, bool):
            raise InvalidProblemError(f"job {job.get('id', '?')!r}: preempt must be true or false")
        flags.append(flag)
    return None if all(flags) else tuple(flags)


def _optional_column(
    jobs: list[Mapping[str, Any]],
    key: str,
    fill: float | None = None,
    minimum: float | None = None,
    positive: bool = False,
) -> np.ndarray | None:
    """A per-job optional key as an array; None if no job gives it.

    Jobs without it get `fill`; with fill None the key is all-or-nothing (a policy that needs
    it then reports it missing).
    """
    if not any(key in job for job in jobs):
        return None
    if fill is None and not all(key in job for job in jobs):
        missing = next(job["id"] for job in jobs if key not in job)
        raise InvalidProblemError(
            f"job {missing!r}: `{key}` is missing; give it for every job or for none"
        )
    values = []
    for job in jobs:
        if key not in job:
            values.append(float(fill))  # type: ignore[arg-type]
            continue
        value = number_at(job, key, 0.0, positive=positive)
        if minimum is not None and value < minimum:
            raise InvalidProblemError(f"job {job['id']!r}: `{key}` {value} must be >= {minimum}")
        values.append(value)
    return np.array(values)


def _utilities(
    jobs: list[Mapping[str, Any]], due_s: np.ndarray | None, tardiness_weight: np.ndarray | None
) -> tuple[Utility, ...] | None:
    """Each job's `utility` (whatif/fields.py `utility_at`), the others' due date and
    tardiness weight read as one; None when no job gives one."""
    if not any("utility" in job for job in jobs):
        return None
    utilities = []
    for m, job in enumerate(jobs):
        due = None if due_s is None or math.isnan(due_s[m]) else float(due_s[m])
        weight = 0.0 if tardiness_weight is None else float(tardiness_weight[m])
        utilities.append(utility_at(job, due, weight) or default_utility(due, weight))
    return tuple(utilities)


def _received(jobs: list[Mapping[str, Any]], gpu_types: tuple[str, ...]) -> np.ndarray | None:
    if not any("time_received_s" in job for job in jobs):
        return None
    received = np.zeros((len(jobs), len(gpu_types)))
    for i, job in enumerate(jobs):
        where = f"job {job['id']!r} / time_received_s"
        per_type = object_at(job, "time_received_s", f"job {job['id']!r}", required=False)
        check_types(per_type, gpu_types, where)
        for t, value in per_type.items():
            received[i, gpu_types.index(t)] = non_negative(value, f"{where} / {t!r}")
    return received
