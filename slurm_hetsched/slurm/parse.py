"""Parse squeue/sinfo/scontrol JSON of Slurm 22.05 (openapi v0.0.38) to 26.05 (v0.0.45).

The shapes differ between versions (see tests/golden/README.md); every difference is absorbed
here, in one place, so the rest of the code sees one record type per object:
- job_state is a string ("RUNNING") in 22.05 and a list (["RUNNING", "REQUEUED"]) later;
- numbers may be plain or wrapped as {"set": true, "infinite": false, "number": 5};
- GPU requests read "gres:gpu:v100:2" up to 23.02 and "gres/gpu:v100:2" from 23.11;
- node state is a string ("idle") or a list (["IDLE", "DRAIN"]).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from slurm_hetsched.errors import SlurmParseError
from slurm_hetsched.slurm.records import (
    NODE_BASE_STATES,
    GpuRequest,
    JobState,
    SlurmJob,
    SlurmNode,
)

# One GPU item of a GRES string: "gpu:v100:2", "gpu:2", "gpu:v100:2(S:0-1)",
# "gpu:v100:1(IDX:0,2)", "gpu:(null):0(IDX:N/A)".
_GRES_ITEM = re.compile(r"^gpu(?::(?P<type>[^:()]+))?:(?P<count>\d+)(?:\((?P<extra>[^)]*)\))?$")
# One GPU item of a TRES-per-node string: "gres:gpu:k80:4", "gres/gpu:v100:1", "gres/gpu=2".
_TRES_GPU = re.compile(r"^gres[:/]gpu(?::(?P<type>[^:=]+))?[:=](?P<count>\d+)$")


def load_json(text: str, what: str) -> Mapping[str, Any]:
    """Decode Slurm's JSON output, raising SlurmParseError with a hint on failure."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        start = text[:120].replace("\n", " ")
        raise SlurmParseError(
            f"{what} did not print JSON ({exc.msg} at char {exc.pos}); output starts {start!r}. "
            "Slurm 22.05 or newer with the serializer/json plugin is needed "
            "(Debian: slurm-wlm-basic-plugins)"
        ) from exc
    if not isinstance(data, Mapping):
        raise SlurmParseError(f"{what} printed JSON that is not an object")
    errors = data.get("errors") or []
    if errors:
        raise SlurmParseError(f"{what} reported errors: {errors}")
    return data


def number(value: Any) -> int | None:
    """A Slurm number: plain, or {"set", "infinite", "number"} (None when unset/infinite)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def split_gres(text: str) -> list[str]:
    """Split a GRES list on commas outside parentheses ("gpu:a:1(IDX:0,2),gpu:b:1")."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def parse_gres_counts(text: str) -> dict[str, int]:
    """GPUs per type from a node GRES string ("gpu:v100:2,gpu:a100:1" -> {"v100": 2, ...}).

    An untyped GPU entry counts under the type "" (empty string). Non-GPU GRES are ignored.
    """
    counts: dict[str, int] = {}
    if text in ("", "N/A", "(null)"):
        return counts
    for item in split_gres(text):
        if item.startswith("gres/"):
            item = item[len("gres/") :]
        match = _GRES_ITEM.match(item)
        if match is None:
            continue
        gpu_type = match["type"] or ""
        if gpu_type == "(null)":
            gpu_type = ""
        counts[gpu_type] = counts.get(gpu_type, 0) + int(match["count"])
    return counts


def parse_gpu_request(tres_per_node: str) -> GpuRequest | None:
    """The GPU part of a job's TRES per node ('gres:gpu:k80:4' or 'gres/gpu:4'), if any."""
    for item in split_gres(tres_per_node):
        match = _TRES_GPU.match(item)
        if match is not None:
            return GpuRequest(count=int(match["count"]), gpu_type=match["type"])
    return None


def _job_state(value: Any) -> tuple[JobState, tuple[str, ...]]:
    """The base state and the flags. 22.05 prints one word, a flag before the base (a requeued
    job still ending its run is "COMPLETING"); 26.05 lists the base and its flags
    (["PENDING", "COMPLETING"]). A completing job is COMPLETING on both: it still holds its
    GPUs, and a requeue is not finished before it ends (a job released earlier is given a
    BeginTime of now + the requeue delay when it does)."""
    states = [value] if isinstance(value, str) else list(value or [])
    upper = [str(state).upper() for state in states]
    if JobState.COMPLETING.value in upper:
        upper.remove(JobState.COMPLETING.value)
        states = [JobState.COMPLETING.value, *upper]
    base = JobState.UNKNOWN
    flags = []
    for state in states:
        try:
            candidate = JobState(str(state).upper())
        except ValueError:
            flags.append(str(state).upper())
            continue
        if base is JobState.UNKNOWN:
            base = candidate
        else:
            flags.append(candidate.value)
    return base, tuple(flags)


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    """One job object of `squeue --json` / `scontrol show job --json`."""
    job_id = number(raw.get("job_id"))
    if job_id is None:
        raise SlurmParseError(f"job without a job_id in Slurm's JSON: keys {sorted(raw)[:12]}")
    state, flags = _job_state(raw.get("job_state"))
    het_job_id = number(raw.get("het_job_id"))
    het_offset = number(raw.get("het_job_offset"))
    tres_per_node = _text(raw.get("tres_per_node"))
    return SlurmJob(
        job_id=str(job_id),
        name=_text(raw.get("name")),
        user=_text(raw.get("user_name")),
        user_id=number(raw.get("user_id")),
        account=_text(raw.get("account")),
        partition=_text(raw.get("partition")),
        state=state,
        state_flags=flags,
        reason=_text(raw.get("state_reason")),
        comment=_text(raw.get("comment")),
        admin_comment=_text(raw.get("admin_comment")),
        restart_count=number(raw.get("restart_cnt")) or 0,
        requeue=bool(raw.get("requeue", False)),
        priority=number(raw.get("priority")) or 0,
        tres_per_node=tres_per_node,
        gpus_per_node=parse_gpu_request(tres_per_node),
        features=_text(raw.get("features")),
        required_nodes=_text(raw.get("required_nodes")),
        excluded_nodes=_text(raw.get("excluded_nodes")),
        nodes=_text(raw.get("nodes")),
        batch_host=_text(raw.get("batch_host")),
        gres_detail=tuple(_text(item) for item in raw.get("gres_detail") or ()),
        submit_time=number(raw.get("submit_time")) or None,
        start_time=number(raw.get("start_time")) or None,
        # Slurm reports het_job_id 0 for ordinary jobs.
        het_job_id=str(het_job_id) if het_job_id else None,
        het_job_offset=het_offset if het_job_id else None,
        work_dir=_text(raw.get("current_working_directory")),
        standard_output=_text(raw.get("standard_output")),
        group_id=number(raw.get("group_id")),
        end_time=number(raw.get("end_time")) or None,
        # "" without accounting (no slurmdbd): both recorded clusters report no QOS.
        qos=_text(raw.get("qos")),
        standard_error=_text(raw.get("standard_error")),
        # Minutes; 22.05 writes null and 26.05 {"infinite": true} for no limit.
        time_limit_min=number(raw.get("time_limit")),
    )


def parse_jobs(text: str, what: str = "squeue --json") -> list[SlurmJob]:
    data = load_json(text, what)
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError(f"{what}: no 'jobs' list in the output (keys: {sorted(data)})")
    return [parse_job(job) for job in jobs]


def _node_state(raw: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    value = raw.get("state")
    if isinstance(value, list):
        # 26.05: base state and flags in one list (["IDLE", "DRAIN"]); the base is found by
        # name, not position, and an unknown list keeps its first word as the base.
        states = [str(s).upper() for s in value]
        base = next((s for s in states if s in NODE_BASE_STATES), states[0] if states else "")
        rest = list(states)
        if base in rest:
            rest.remove(base)
        return base or "UNKNOWN", tuple(rest)
    flags = tuple(str(flag).upper() for flag in raw.get("state_flags") or ())
    return str(value or "UNKNOWN").upper(), flags


def _words(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if str(v))
    return tuple(word for word in _text(value).split(",") if word)


def parse_node(raw: Mapping[str, Any]) -> SlurmNode:
    """One node object of `sinfo --json` (22.05) or `scontrol show nodes --json` (26.05)."""
    name = _text(raw.get("name"))
    if not name:
        raise SlurmParseError(f"node without a name in Slurm's JSON: keys {sorted(raw)[:12]}")
    state, flags = _node_state(raw)
    return SlurmNode(
        name=name,
        state=state,
        state_flags=flags,
        gpus=parse_gres_counts(_text(raw.get("gres"))),
        gpus_used=parse_gres_counts(_text(raw.get("gres_used"))),
        features=_words(raw.get("features")),
        active_features=_words(raw.get("active_features")),
        partitions=_words(raw.get("partitions")),
        reason=_text(raw.get("reason")),
        cpus=number(raw.get("cpus")) or 0,
        alloc_cpus=number(raw.get("alloc_cpus")) or 0,
    )


def parse_nodes(text: str, what: str = "sinfo --json") -> list[SlurmNode]:
    """Nodes from `sinfo --json` (22.05: a "nodes" list), `scontrol show nodes --json`
    (23.02 on: a "nodes" list), or `sinfo --json` of 23.x on (an "sinfo" list of node groups,
    one per partition and state, flattened here to one record per node)."""
    data = load_json(text, what)
    nodes = data.get("nodes")
    if isinstance(nodes, list):
        return [parse_node(node) for node in nodes]
    groups = data.get("sinfo")
    if isinstance(groups, list):
        return _nodes_from_sinfo_groups(groups)
    raise SlurmParseError(
        f"{what}: no 'nodes' or 'sinfo' list in the output (keys: {sorted(data)})"
    )


def _nodes_from_sinfo_groups(groups: list[Mapping[str, Any]]) -> list[SlurmNode]:
    by_name: dict[str, SlurmNode] = {}
    for group in groups:
        names = (group.get("nodes") or {}).get("nodes") or []
        gres = group.get("gres") or {}
        features = group.get("features") or {}
        partition = _text((group.get("partition") or {}).get("name"))
        for name in names:
            if name in by_name:
                # The same node in another partition's group: only the partition is new.
                known = by_name[name]
                if partition and partition not in known.partitions:
                    by_name[name] = dataclasses.replace(
                        known, partitions=(*known.partitions, partition)
                    )
                continue
            by_name[name] = parse_node(
                {
                    "name": name,
                    "state": (group.get("node") or {}).get("state"),
                    "gres": gres.get("total"),
                    "gres_used": gres.get("used"),
                    "features": features.get("total"),
                    "active_features": features.get("active"),
                    "partitions": [partition] if partition else [],
                    "reason": (group.get("reason") or {}).get("description"),
                    "cpus": (group.get("cpus") or {}).get("total"),
                    "alloc_cpus": (group.get("cpus") or {}).get("allocated"),
                }
            )
    return list(by_name.values())


_SBATCH_ID = re.compile(r"^\s*(?:Submitted batch job\s+)?(?P<id>\d+)(?:;[\w.-]+)?\s*$")


def parse_sbatch_job_id(stdout: str) -> str:
    """The job id from `sbatch --parsable` ('123' or '123;cluster')."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    match = _SBATCH_ID.match(lines[-1]) if lines else None
    if match is None:
        raise SlurmParseError(
            f"sbatch output not understood: {stdout.strip()!r}; expected '<job id>[;<cluster>]'"
        )
    return match["id"]
