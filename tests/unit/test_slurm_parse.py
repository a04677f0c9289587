"""Parsing Slurm's JSON, replayed from output recorded on the real clusters (tests/golden/):
Slurm 22.05.8 (the dev cluster) and 26.05.5 (a Debian sid chroot), same scenario on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hetsched.errors import (
    InvalidRequestError,
    SlurmCommandError,
    SlurmParseError,
    UnknownJobError,
)
from slurm_hetsched.slurm.cli import classify_failure
from slurm_hetsched.slurm.parse import (
    parse_gpu_request,
    parse_gres_counts,
    parse_job,
    parse_jobs,
    parse_nodes,
    parse_sbatch_job_id,
    split_gres,
)
from slurm_hetsched.slurm.records import GpuRequest, JobState, SlurmJob, SlurmNode

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# Every recorded release (tests/golden/README.md: how to record a new one): the oldest
# supported, 22.05, and whatever Debian sid carried when recorded.
VERSIONS = sorted(p.name.removeprefix("slurm-") for p in GOLDEN.glob("slurm-*") if p.is_dir())
assert "22.05" in VERSIONS and len(VERSIONS) >= 2, VERSIONS
SPEC = "hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1"


def recorded(version: str, name: str) -> str:
    return (GOLDEN / f"slurm-{version}" / name).read_text()


def scenario(version: str) -> dict[str, list[SlurmJob]]:
    """Jobs of the recorded scenario by their letter (A..G, see record_scenario.sh)."""
    ids = dict(line.split("=") for line in recorded(version, "jobs.txt").split())
    jobs = parse_jobs(recorded(version, "squeue_all.json"))
    by_letter: dict[str, list[SlurmJob]] = {}
    for letter, job_id in ids.items():
        by_letter[letter] = [j for j in jobs if j.job_id == job_id or j.het_job_id == job_id]
    return by_letter


@pytest.mark.parametrize("version", VERSIONS)
def test_running_typed_job_with_comment_and_admin_comment(version: str) -> None:
    (job,) = scenario(version)["A"]
    assert (job.name, job.state, job.nodes, job.user, job.partition) == (
        "typed-v100",
        JobState.RUNNING,
        "n1",
        "root",
        "gpu",
    )
    assert job.gpus_per_node == GpuRequest(2, "v100")
    assert job.comment == SPEC
    assert job.admin_comment == "hetsched r=1 v100x2@n1 share=v100:1.00 prio=1.0"
    assert job.requeue and job.restart_count == 0
    assert job.gres_detail == ("gpu:v100:2(IDX:0-1)",)
    assert job.submit_time and job.start_time and job.start_time >= job.submit_time
    assert not job.held and not job.is_het_component


@pytest.mark.parametrize("version", VERSIONS)
def test_untyped_request_with_constraint(version: str) -> None:
    (job,) = scenario(version)["B"]
    assert job.gpus_per_node == GpuRequest(1, None)
    assert (job.features, job.nodes, job.state) == ("p100", "n2", JobState.RUNNING)


@pytest.mark.parametrize("version", VERSIONS)
def test_held_pending_job_with_required_and_excluded_nodes(version: str) -> None:
    (job,) = scenario(version)["C"]
    assert job.state is JobState.PENDING and job.held
    assert (job.reason, job.priority, job.start_time is None or job.start_time > 0) == (
        "JobHeldUser",
        0,
        True,
    )
    assert (job.features, job.required_nodes, job.excluded_nodes) == ("k80", "n3", "n1")
    assert job.gpus_per_node == GpuRequest(2, None)
    assert job.nodes == ""


@pytest.mark.parametrize("version", VERSIONS)
def test_heterogeneous_job_components(version: str) -> None:
    components = sorted(scenario(version)["D"], key=lambda j: j.het_job_offset or 0)
    leader = components[0].job_id
    assert [c.slurm_id for c in components] == [f"{leader}+0", f"{leader}+1"]
    assert all(c.het_job_id == leader and c.is_het_component for c in components)
    assert [c.nodes for c in components] == ["n2", "n3"]
    assert [c.gpus_per_node for c in components] == [GpuRequest(1, "p100"), GpuRequest(2, "k80")]
    assert [c.required_nodes for c in components] == ["n2", "n3"]


@pytest.mark.parametrize("version", VERSIONS)
def test_finished_requeued_and_cancelled_jobs(version: str) -> None:
    jobs = scenario(version)
    (done,) = jobs["E"]
    (requeued,) = jobs["F"]
    (cancelled,) = jobs["G"]
    assert done.state is JobState.COMPLETED and not done.state.is_active
    assert done.start_time is not None and done.end_time is not None
    assert 0 <= done.end_time - done.start_time < 600, "a finished job's end is its real end"
    assert (requeued.state, requeued.restart_count, requeued.nodes) == (JobState.RUNNING, 1, "n3")
    assert cancelled.state is JobState.CANCELLED


# `scontrol show nodes --json` does not exist in 22.05; 26.05's sinfo groups nodes.
@pytest.mark.parametrize(
    ("version", "source"),
    [("22.05", "sinfo.json"), ("26.05", "sinfo.json"), ("26.05", "scontrol_nodes.json")],
)
def test_nodes_with_gpu_types_use_and_features(version: str, source: str) -> None:
    nodes = {n.name: n for n in parse_nodes(recorded(version, source))}
    assert {name: dict(n.gpus) for name, n in nodes.items()} == {
        "n1": {"v100": 2},
        "n2": {"p100": 2},
        "n3": {"k80": 4},
    }
    # A (2 x v100) on n1; B (1) and D+0 (1) on n2; D+1 (2) and F (1) on n3.
    assert {name: dict(n.gpus_used) for name, n in nodes.items()} == {
        "n1": {"v100": 2},
        "n2": {"p100": 2},
        "n3": {"k80": 3},
    }
    assert {name: n.features for name, n in nodes.items()} == {
        "n1": ("v100",),
        "n2": ("p100",),
        "n3": ("k80",),
    }
    assert all(n.partitions == ("gpu",) and n.available for n in nodes.values())
    assert nodes["n3"].gpus_free == {"k80": 1}


@pytest.mark.parametrize("version", VERSIONS)
def test_qos_is_read_and_empty_without_accounting(version: str) -> None:
    # Neither recorded cluster runs slurmdbd: Slurm reports every job's QOS as "".
    assert {job.qos for job in parse_jobs(recorded(version, "squeue_all.json"))} == {""}
    (job,) = parse_jobs('{"jobs": [{"job_id": 5, "job_state": "PENDING", "qos": "high"}]}')
    assert job.qos == "high"


# Node n3 of the 22.05 dev cluster as `sinfo --json` printed it (other fields left out): drained
# idle, drained under a running job, in an active reservation, in a maintenance reservation,
# and set DOWN (`scontrol update NodeName=n3 State=DRAIN|DOWN`, `scontrol create reservation
# ... Nodes=n3 [Flags=MAINT]`).
IDLE_GPUS = "gpu:k80:0(IDX:N/A)"
RECORDED_22_05_NODE_STATES: dict[str, dict[str, object]] = {
    "drained": {"state": "idle", "state_flags": ["DRAIN"], "gres_used": IDLE_GPUS},
    "draining": {"state": "mixed", "state_flags": ["DRAIN"], "gres_used": "gpu:k80:1(IDX:0)"},
    "reserved": {"state": "idle", "state_flags": ["RESERVED"], "gres_used": IDLE_GPUS},
    "maint": {
        "state": "idle",
        "state_flags": ["MAINTENANCE", "RESERVED"],
        "gres_used": IDLE_GPUS,
    },
    "down": {"state": "down", "state_flags": ["NOT_RESPONDING"], "gres_used": IDLE_GPUS},
}


def node_from(raw_state: dict[str, object]) -> SlurmNode:
    raw = {"name": "n3", "partitions": ["gpu"], "gres": "gpu:k80:4", "gres_used": IDLE_GPUS}
    (node,) = parse_nodes(json.dumps({"nodes": [{**raw, **raw_state}]}))
    return node


@pytest.mark.parametrize(
    ("case", "blocking"),
    [
        ("drained", ("DRAIN",)),
        ("draining", ("DRAIN",)),
        ("reserved", ("RESERVED",)),
        ("maint", ("MAINTENANCE", "RESERVED")),
        ("down", ("DOWN", "NOT_RESPONDING")),
    ],
)
def test_recorded_22_05_node_states_are_not_plannable(case: str, blocking: tuple[str, ...]) -> None:
    node = node_from(RECORDED_22_05_NODE_STATES[case])
    assert node.unplannable == blocking
    assert not node.available
    # The GPUs are still reported (and the running job's); only the state takes them away.
    used = 1 if case == "draining" else 0
    assert (dict(node.gpus), dict(node.gpus_used)) == ({"k80": 4}, {"k80": used})


@pytest.mark.parametrize(
    ("state", "base", "blocking"),
    [
        # 26.05 writes base state and flags in one list; the base is found by name.
        (["IDLE", "DRAIN"], "IDLE", ("DRAIN",)),
        (["DRAIN", "MIXED"], "MIXED", ("DRAIN",)),
        (["IDLE", "RESERVED"], "IDLE", ("RESERVED",)),
        (["IDLE", "POWERED_DOWN"], "IDLE", ("POWERED_DOWN",)),
        (["IDLE", "POWERING_DOWN"], "IDLE", ("POWERING_DOWN",)),
        (["MIXED", "FAIL"], "MIXED", ("FAIL",)),
        (["DOWN", "NOT_RESPONDING"], "DOWN", ("DOWN", "NOT_RESPONDING")),
        (["FUTURE"], "FUTURE", ("FUTURE",)),
        (["UNKNOWN"], "UNKNOWN", ("UNKNOWN",)),
        ([], "UNKNOWN", ("UNKNOWN",)),
        # Flags that do not keep jobs away.
        (["MIXED", "PLANNED"], "MIXED", ()),
        (["IDLE", "COMPLETING"], "IDLE", ()),
        (["ALLOCATED", "CLOUD"], "ALLOCATED", ()),
        # A base state this code does not know is not trusted.
        (["SOMETHING_NEW"], "SOMETHING_NEW", ("SOMETHING_NEW",)),
    ],
)
def test_26_05_node_state_lists(state: list[str], base: str, blocking: tuple[str, ...]) -> None:
    node = node_from({"state": state})
    assert node.state == base and base not in node.state_flags
    assert node.unplannable == blocking
    assert node.available is (blocking == ())


def test_a_job_still_completing_is_completing_in_both_dialects() -> None:
    """26.05 lists a requeued job that is still ending its run as ["PENDING", "COMPLETING"];
    22.05 prints "COMPLETING". Both are COMPLETING: not held yet, its GPUs still in use."""
    base = json.loads(recorded("26.05", "squeue.json"))["jobs"][0]
    for raw_state in (["PENDING", "COMPLETING"], "COMPLETING"):
        job = parse_job({**base, "job_state": raw_state})
        assert job.state is JobState.COMPLETING
        assert not job.held
    assert parse_job({**base, "job_state": ["PENDING", "COMPLETING"]}).state_flags == ("PENDING",)


def test_job_state_list_of_26_05_keeps_flags() -> None:
    (job,) = parse_jobs('{"jobs": [{"job_id": 5, "job_state": ["PENDING", "REQUEUED"]}]}')
    assert (job.state, job.state_flags) == (JobState.PENDING, ("REQUEUED",))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres:gpu:k80:4", GpuRequest(4, "k80")),
        ("gres/gpu:v100:1", GpuRequest(1, "v100")),
        ("gres:gpu:2", GpuRequest(2)),
        ("gres/gpu:2", GpuRequest(2)),
        ("gres/gpu=3", GpuRequest(3)),
        ("gres/shard:1,gres/gpu:a100:2", GpuRequest(2, "a100")),
        ("", None),
        ("gres:shard:1", None),
    ],
)
def test_gpu_requests_in_both_tres_spellings(text: str, expected: GpuRequest | None) -> None:
    assert parse_gpu_request(text) == expected


def test_gres_strings_with_indices_and_several_types() -> None:
    assert split_gres("gpu:a100:2(IDX:0,2),gpu:t4:1(IDX:3)") == [
        "gpu:a100:2(IDX:0,2)",
        "gpu:t4:1(IDX:3)",
    ]
    assert parse_gres_counts("gpu:a100:2(IDX:0,2),gpu:t4:1(IDX:3)") == {"a100": 2, "t4": 1}
    assert parse_gres_counts("gpu:v100:0(IDX:N/A)") == {"v100": 0}
    assert parse_gres_counts("gpu:4(S:0-1),shard:8") == {"": 4}
    assert parse_gres_counts("(null)") == {}


def test_malformed_output_gives_a_parse_error_that_says_what_to_do() -> None:
    with pytest.raises(SlurmParseError, match=r"did not print JSON.*serializer/json"):
        parse_jobs("squeue: error: unrecognized option '--json'")
    with pytest.raises(SlurmParseError, match="no 'jobs' list"):
        parse_jobs('{"nodes": []}')
    with pytest.raises(SlurmParseError, match="reported errors"):
        parse_nodes('{"errors": [{"error": "boom"}], "nodes": []}')
    with pytest.raises(SlurmParseError, match="without a job_id"):
        parse_jobs('{"jobs": [{"name": "x"}]}')


def test_sbatch_ids() -> None:
    assert parse_sbatch_job_id("42\n") == "42"
    assert parse_sbatch_job_id("42;cluster\n") == "42"
    assert parse_sbatch_job_id("Submitted batch job 7\n") == "7"
    with pytest.raises(SlurmParseError, match="sbatch output not understood"):
        parse_sbatch_job_id("sbatch: error: nope")


def recorded_errors(version: str) -> dict[str, tuple[list[str], int, str]]:
    cases = {}
    for block in recorded(version, "errors.txt").split("=== case: ")[1:]:
        name, rest = block.split("\n", 1)
        argv = rest.split("argv: ", 1)[1].split("\n", 1)[0].split()
        returncode = int(rest.split("rc: ", 1)[1].split("\n", 1)[0])
        stderr = rest.split("--- stderr ---\n", 1)[1].split("--- stdout ---", 1)[0]
        cases[name.strip()] = (argv, returncode, stderr)
    return cases


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("update-unknown-job", UnknownJobError),
        ("sbatch-unknown-gpu-type", InvalidRequestError),
        ("sbatch-too-many-gpus", InvalidRequestError),
        ("requeue-pending-job", InvalidRequestError),
        ("update-features-running", InvalidRequestError),
    ],
)
def test_recorded_failures_map_to_typed_errors(
    version: str, case: str, error: type[SlurmCommandError]
) -> None:
    argv, returncode, stderr = recorded_errors(version)[case]
    assert returncode != 0
    failure = classify_failure(argv, returncode, stderr)
    assert type(failure) is error
    assert failure.argv == tuple(argv) and failure.stderr == stderr.strip()
    assert stderr.strip() in str(failure)
