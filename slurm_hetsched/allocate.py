"""The what-if allocation: a problem in JSON -> a policy's allocation in JSON.

`hetsched allocate --problem P.json --policy NAME` calls `run_allocate`; `--list` prints
`policy_descriptions()`. The formats are docs/interfaces.md "What-if allocation" (input and
output), with one addition: instead of `throughput`, a job may name a `class` of the shipped
throughput table (Gavel's, see docs/throughput.md), read at the job's `num_gpus`.

Parsing is strict: unknown keys are rejected with the valid ones listed, and every error names
the job, GPU type or key at fault. The reported `solve_s` is the wall time of the policy's
`allocate` call, measured here (the core reads no clock).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from slurm_hetsched.core.catalog import merge_gpu_types, parse_gpu_types, parse_site_energy
from slurm_hetsched.core.costs import EnergyModel, decision_costs
from slurm_hetsched.core.model import (
    Account,
    AccountPolicy,
    GpuSlice,
    InvalidProblemError,
    Node,
    PackedPairs,
    Placement,
    Problem,
)
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.options import parse_options
from slurm_hetsched.core.policies.packing import packed_pairs_from_table
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs

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
}
_NODE_KEYS = {"name", "gpus", "gpus_in_use", "available"}
_SLICE_KEYS = {"node", "type", "count"}
_ACCOUNT_KEYS = {"weight", "policy"}


def policy_descriptions() -> dict[str, str]:
    """Every registered policy name -> its one-line description (for `allocate --list`)."""
    return {name: cls.description for name, cls in POLICIES.items()}


def run_allocate(
    problem_json: Mapping[str, Any],
    policy_name: str,
    table: ThroughputTable | None = None,
    *,
    options: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """Solve a what-if problem with one policy.

    Args:
        problem_json: the parsed problem file (docs/interfaces.md).
        policy_name: a name from `policy_descriptions()`.
        table: the throughput table for jobs given by `class`; default the shipped one.
        options: policy options (e.g. {"energy_slack": 0.1}; values may be strings such as
            "0.1"), merged over the file's `policy_options`: a key given here wins.

    Returns:
        {"policy", "allocation": {job: {gpu type: time fraction}}, "objective", "solve_s"},
        values rounded to 3 digits; placement policies add "placement" (job -> its GPUs on
        nodes; a job left out is postponed). When every GPU type has busy_w and idle_w and
        the problem gives `nodes` or `steps`, or options are in effect, "costs": the
        decision's expected energy and tardiness (core/costs.py `decision_costs`); options
        in effect are echoed as "policy_options".

    Raises:
        ConfigError: unknown policy name, or an option it does not accept or a bad value.
        InvalidProblemError: the problem is malformed or cannot be solved as given.
        SolverError: the solver did not reach an optimal solution.
    """
    merged = {**policy_options(problem_json), **(options or {})}
    policy = get_policy(policy_name, merged)
    problem = parse_problem(problem_json, table)
    started = time.perf_counter()
    allocation = policy.allocate(problem)
    elapsed = time.perf_counter() - started
    out = dataclasses.replace(allocation, solve_s=elapsed).to_json()
    if merged:
        out["policy_options"] = parse_options(policy_name, policy.options, merged)
    if problem.energy is not None and (problem.nodes or problem.steps is not None or merged):
        out["costs"] = decision_costs(problem, allocation.x, allocation.placements)
    return out


def policy_options(data: Mapping[str, Any]) -> dict[str, object]:
    """The file's optional top-level `policy_options` object ({} if absent).

    Raises:
        InvalidProblemError: it is not an object.
    """
    return dict(_mapping(data, "policy_options", "problem", required=False))


def parse_problem(data: Mapping[str, Any], table: ThroughputTable | None = None) -> Problem:
    """The what-if JSON -> a Problem (see run_allocate). Raises InvalidProblemError."""
    _check_keys(data, _PROBLEM_KEYS, "problem")
    gpu_types, capacity, nodes = _capacity(data)
    jobs = data.get("jobs")
    if not isinstance(jobs, list) or not all(isinstance(j, Mapping) for j in jobs):
        raise InvalidProblemError("problem: `jobs` must be a list of objects")
    for job in jobs:
        _check_keys(job, _JOB_KEYS, f"job {job.get('id', '?')!r}")
    ids = tuple(_job_id(job) for job in jobs)
    allowed = [_allowed_gpus(job) for job in jobs]
    num_gpus = np.array(
        [_num_gpus(job, a) for job, a in zip(jobs, allowed, strict=True)], dtype=np.int64
    )
    throughput = np.array(
        [_throughput_row(job, n, gpu_types, table) for job, n in zip(jobs, num_gpus, strict=True)]
    ).reshape(len(jobs), len(gpu_types))
    catalog = shipped_gpu_types()
    site = shipped_site_energy()
    if "gpu_types" in data:
        overrides = _mapping(data, "gpu_types", "problem")
        catalog = merge_gpu_types(catalog, parse_gpu_types(overrides))
        site = parse_site_energy(overrides, base=site)
    prices = [catalog[t].price_per_hour if t in catalog else None for t in gpu_types]
    any_allowed = any(a is not None for a in allowed)
    return Problem(
        job_ids=ids,
        gpu_types=gpu_types,
        throughput=throughput,
        capacity=capacity,
        num_gpus=num_gpus,
        weight=np.array([_number(job, "weight", 1.0, positive=True) for job in jobs]),
        job_accounts=tuple(str(job.get("account", "")) for job in jobs),
        accounts=_accounts(data),
        arrival_s=np.array([_number(job, "arrival_s", 0.0) for job in jobs]),
        steps=_optional_column(jobs, "steps", minimum=0.0),
        due_s=_optional_column(jobs, "due_s", fill=math.nan),
        tardiness_weight=_optional_column(jobs, "tardiness_weight", fill=0.0, minimum=0.0),
        slo_s=_optional_column(jobs, "slo_s", fill=math.inf, positive=True),
        received_s=_received(jobs, gpu_types),
        packed=_with_table_pairs(_packed(jobs, ids, gpu_types), jobs, num_gpus, gpu_types, table),
        price_per_hour=None if None in prices else np.array(prices, dtype=float),
        nodes=nodes,
        running=_running(jobs, nodes),
        allowed_gpus=(
            tuple(a or (int(n),) for a, n in zip(allowed, num_gpus, strict=True))
            if any_allowed
            else None
        ),
        throughput_at=_throughput_at(jobs, allowed, gpu_types, table) if any_allowed else None,
        energy=EnergyModel.from_catalog(catalog, site, gpu_types),
    )


# ----------------------------------------------------------------------------------------------
# Pieces of the problem


def _capacity(data: Mapping[str, Any]) -> tuple[tuple[str, ...], np.ndarray, tuple[Node, ...]]:
    """(GPU types in file order, (n_types,) free GPUs, the nodes or ()) from `gpus` or `nodes`."""
    if ("gpus" in data) == ("nodes" in data):
        raise InvalidProblemError("problem: give exactly one of `gpus` and `nodes`")
    if "gpus" in data:
        gpus = _mapping(data, "gpus", "problem")
        types_ = tuple(gpus)
        counts = [_count(gpus[t], f"gpus / {t!r}") for t in types_]
        return types_, np.array(counts, dtype=float), ()
    nodes_json = data["nodes"]
    if not isinstance(nodes_json, list):
        raise InvalidProblemError("problem: `nodes` must be a list of objects")
    nodes = []
    for raw in nodes_json:
        if not isinstance(raw, Mapping):
            raise InvalidProblemError("problem: `nodes` must be a list of objects")
        _check_keys(raw, _NODE_KEYS, f"node {raw.get('name', '?')!r}")
        where = f"node {raw.get('name', '?')!r}"
        gpus = {
            t: _count(c, f"{where} / gpus / {t!r}") for t, c in _mapping(raw, "gpus", where).items()
        }
        in_use = {
            t: _count(c, f"{where} / gpus_in_use / {t!r}")
            for t, c in _mapping(raw, "gpus_in_use", where, required=False).items()
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
    counts = {k: _count(v, f"{where} / {k}") for k, v in values.items()}
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
    counts = sorted({_count(v, where) for v in raw})
    if counts[0] < 1:
        raise InvalidProblemError(f"{where}: GPU counts must be >= 1, got {raw!r}")
    return tuple(counts)


def _throughput_at(
    jobs: list[Mapping[str, Any]],
    allowed: list[tuple[int, ...] | None],
    gpu_types: tuple[str, ...],
    table: ThroughputTable | None,
) -> np.ndarray:
    """(n_jobs, n_types, max allowed count) steps/s at every GPU count; NaN = not given.

    A `throughput` given per GPU count fills the counts it names; a `class` fills the counts
    the table has for that class (a type without a column: 0, cannot run). The rest is NaN,
    for Problem.rates_at to scale.
    """
    width = max(max(a) for a in allowed if a is not None)
    out = np.full((len(jobs), len(gpu_types), width), np.nan)
    for m, job in enumerate(jobs):
        if "class" in job:
            table = table or shipped_throughputs()
            known = [t for t in gpu_types if t in table.gpu_types]
            for g in table.gpu_counts(str(job["class"])):
                if g <= width:
                    row = dict(zip(known, table.row(str(job["class"]), g, known), strict=True))
                    out[m, :, g - 1] = [row.get(t, 0.0) for t in gpu_types]
            continue
        for j, t in enumerate(gpu_types):
            value = _mapping(job, "throughput", f"job {job['id']!r}").get(t, 0.0)
            if isinstance(value, Mapping):
                for count, rate in value.items():
                    at = f"job {job['id']!r} / throughput / {t!r} / {count!r}"
                    if not str(count).isdigit() or int(count) < 1:
                        raise InvalidProblemError(f"{at}: a GPU count must be a whole number >= 1")
                    if int(count) <= width:
                        out[m, j, int(count) - 1] = _non_negative(rate, at)
            elif value == 0.0:
                out[m, j, :] = 0.0  # a type the job cannot run on, at any count
    return out


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
            _check_keys(piece, _SLICE_KEYS, where)
            missing = sorted(_SLICE_KEYS - set(piece))
            if missing:
                raise InvalidProblemError(f"{where}: missing key(s) {missing}")
            count = _count(piece["count"], f"{where} / count")
            slices.append(GpuSlice(str(piece["node"]), str(piece["type"]), count))
        running[str(job["id"])] = Placement(str(job["id"]), tuple(slices))
    return running


def _throughput_row(
    job: Mapping[str, Any], num_gpus: int, gpu_types: tuple[str, ...], table: ThroughputTable | None
) -> list[float]:
    where = f"job {job['id']!r}"
    if ("throughput" in job) == ("class" in job):
        raise InvalidProblemError(f"{where}: give exactly one of `throughput` and `class`")
    if "class" in job:
        table = table or shipped_throughputs()
        known = [t for t in gpu_types if t in table.gpu_types]
        try:
            found = dict(zip(known, table.row(str(job["class"]), num_gpus, known), strict=True))
        except UnknownJobClassError as exc:
            raise InvalidProblemError(f"{where}: {exc}") from None
        return [float(found.get(t, 0.0)) for t in gpu_types]  # no column: cannot run there
    per_type = _mapping(job, "throughput", where)
    _check_types(per_type, gpu_types, f"{where} / throughput")
    row = []
    for t in gpu_types:
        value = per_type.get(t, 0.0)
        if isinstance(value, Mapping):  # {"1": t1, "2": t2, ...} per GPU count
            value = value.get(str(num_gpus), 0.0)
        row.append(_non_negative(value, f"{where} / throughput / {t!r}"))
    return row


def _accounts(data: Mapping[str, Any]) -> dict[str, Account]:
    accounts = {}
    for name, raw in _mapping(data, "accounts", "problem", required=False).items():
        where = f"account {name!r}"
        if not isinstance(raw, Mapping):
            raise InvalidProblemError(f"{where}: must be an object with `weight`, `policy`")
        _check_keys(raw, _ACCOUNT_KEYS, where)
        policy = raw.get("policy", "fair")
        valid = [p.value for p in AccountPolicy]
        if policy not in valid:
            raise InvalidProblemError(f"{where}: policy {policy!r}; expected one of {valid}")
        weight = _number(raw, "weight", 1.0, positive=True, where=where)
        accounts[name] = Account(name, weight, AccountPolicy(policy))
    return accounts


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
        value = _number(job, key, 0.0, positive=positive)
        if minimum is not None and value < minimum:
            raise InvalidProblemError(f"job {job['id']!r}: `{key}` {value} must be >= {minimum}")
        values.append(value)
    return np.array(values)


def _received(jobs: list[Mapping[str, Any]], gpu_types: tuple[str, ...]) -> np.ndarray | None:
    if not any("time_received_s" in job for job in jobs):
        return None
    received = np.zeros((len(jobs), len(gpu_types)))
    for i, job in enumerate(jobs):
        where = f"job {job['id']!r} / time_received_s"
        per_type = _mapping(job, "time_received_s", f"job {job['id']!r}", required=False)
        _check_types(per_type, gpu_types, where)
        for t, value in per_type.items():
            received[i, gpu_types.index(t)] = _non_negative(value, f"{where} / {t!r}")
    return received


def _packed(
    jobs: list[Mapping[str, Any]], ids: tuple[str, ...], gpu_types: tuple[str, ...]
) -> PackedPairs | None:
    pairs: dict[tuple[int, int], np.ndarray] = {}
    for i, job in enumerate(jobs):
        where = f"job {job['id']!r} / packed"
        for partner, per_type in _mapping(
            job, "packed", f"job {job['id']!r}", required=False
        ).items():
            if partner not in ids:
                raise InvalidProblemError(f"{where}: unknown partner job {partner!r}")
            if not isinstance(per_type, Mapping):
                raise InvalidProblemError(f"{where} / {partner!r}: expected {{type: [a, b]}}")
            _check_types(per_type, gpu_types, f"{where} / {partner!r}")
            j = ids.index(partner)
            key = (min(i, j), max(i, j))
            if key in pairs:
                raise InvalidProblemError(f"{where}: the pair with {partner!r} is given twice")
            tput = np.zeros((len(gpu_types), 2))
            for t, value in per_type.items():
                if not isinstance(value, list) or len(value) != 2:
                    raise InvalidProblemError(f"{where} / {partner!r} / {t!r}: expected [a, b]")
                a, b = (_non_negative(v, f"{where} / {partner!r} / {t!r}") for v in value)
                tput[gpu_types.index(t)] = (a, b) if i < j else (b, a)
            pairs[key] = tput
    if not pairs:
        return None
    keys = sorted(pairs)
    return PackedPairs(pairs=np.array(keys), throughput=np.array([pairs[k] for k in keys]))


def _with_table_pairs(
    given: PackedPairs | None,
    jobs: list[Mapping[str, Any]],
    num_gpus: np.ndarray,
    gpu_types: tuple[str, ...],
    table: ThroughputTable | None,
) -> PackedPairs | None:
    """The given pairs plus every pair of `class` jobs the table lists together (same
    num_gpus); a pair given in the file wins over the table's."""
    with_class = [i for i, job in enumerate(jobs) if "class" in job]
    if len(with_class) < 2:
        return given
    found = packed_pairs_from_table(
        table or shipped_throughputs(),
        [str(jobs[i]["class"]) for i in with_class],
        num_gpus[with_class],
        gpu_types,
    )
    pairs: dict[tuple[int, int], np.ndarray] = {}
    if found is not None:
        for (a, b), tput in zip(found.pairs, found.throughput, strict=True):
            pairs[(with_class[a], with_class[b])] = tput
    if given is not None:
        for (a, b), tput in zip(given.pairs, given.throughput, strict=True):
            pairs[(int(a), int(b))] = tput
    if not pairs:
        return None
    keys = sorted(pairs)
    return PackedPairs(pairs=np.array(keys), throughput=np.array([pairs[k] for k in keys]))


# ----------------------------------------------------------------------------------------------
# Validation helpers


def _check_keys(data: Mapping[str, Any], valid: set[str], where: str) -> None:
    unknown = sorted(set(data) - valid)
    if unknown:
        raise InvalidProblemError(
            f"{where}: unknown key(s) {unknown}; valid keys are {sorted(valid)}"
        )


def _check_types(per_type: Mapping[str, Any], gpu_types: tuple[str, ...], where: str) -> None:
    unknown = [t for t in per_type if t not in gpu_types]
    if unknown:
        raise InvalidProblemError(
            f"{where}: unknown GPU type {unknown[0]!r}; the problem's types are {list(gpu_types)}"
        )


def _mapping(
    data: Mapping[str, Any], key: str, where: str, required: bool = True
) -> Mapping[str, Any]:
    if key not in data:
        if required:
            raise InvalidProblemError(f"{where}: `{key}` is missing")
        return {}
    value = data[key]
    if not isinstance(value, Mapping):
        raise InvalidProblemError(f"{where}: `{key}` must be an object, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(
    data: Mapping[str, Any],
    key: str,
    default: float,
    positive: bool = False,
    where: str | None = None,
) -> float:
    where = where or f"job {data.get('id')!r}"
    value = data.get(key, default)
    if not _is_number(value) or math.isnan(value):
        raise InvalidProblemError(f"{where}: `{key}` must be a number, got {value!r}")
    if positive and not value > 0:
        raise InvalidProblemError(f"{where}: `{key}` must be > 0, got {value!r}")
    return float(value)


def _non_negative(value: Any, where: str) -> float:
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise InvalidProblemError(f"{where}: {value!r} must be a finite number >= 0")
    return float(value)


def _count(value: Any, where: str) -> int:
    if not _is_number(value) or value < 0 or value != int(value):
        raise InvalidProblemError(f"{where}: {value!r} must be a whole number >= 0")
    return int(value)
