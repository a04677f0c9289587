"""What the controller may plan onto and manage (`build_view`): only nodes Slurm gives new jobs
(not drained, down, reserved, ...), and only the partitions and QOS its config names."""

from __future__ import annotations

import dataclasses

import pytest
from controller_builders import TABLE, TZ, held, running, slurm_job, slurm_node

from slurm_hetsched.controller.jobview import SlurmView, build_view
from slurm_hetsched.slurm.records import JobState, SlurmJob, SlurmNode

N1 = slurm_node("n1", {"v100": 2})
N2 = slurm_node("n2", {"p100": 2})
N3 = slurm_node("n3", {"k80": 4})


def view(jobs: list[SlurmJob], nodes: list[SlurmNode], **kwargs: object) -> SlurmView:
    options: dict[str, object] = {"now_s": 10_000.0, "table": TABLE, "local_tz": TZ}
    options.update(kwargs)
    return build_view(jobs, nodes, **options)  # type: ignore[arg-type]


def with_state(node: SlurmNode, base: str, *flags: str, used: int | None = None) -> SlurmNode:
    gpus_used = node.gpus_used if used is None else {t: used for t in node.gpus}
    return dataclasses.replace(node, state=base, state_flags=flags, gpus_used=gpus_used)


def in_partitions(node: SlurmNode, *partitions: str) -> SlurmNode:
    return dataclasses.replace(node, partitions=partitions)


def capacity(v: SlurmView) -> dict[str, float]:
    types = v.snapshot.gpu_types
    return dict(zip(types, v.snapshot.capacity(types).tolist(), strict=True))


def in_use(v: SlurmView) -> dict[str, dict[str, int]]:
    return {n.name: dict(n.gpus_in_use) for n in v.snapshot.nodes}


# ----------------------------------------------------------------------------------------------
# Node states


def test_a_drained_node_under_a_running_managed_job_offers_none_of_its_gpus() -> None:
    """n3 drained while managed job 100 (2 k80) and an unmanaged job (1 k80) run there: n3 stays
    in the snapshot without a free GPU, job 100 is a job to schedule, and its two k80 become
    free capacity nowhere else."""
    jobs = [
        running("100", "n3", "k80", gpus=2),
        slurm_job("101", comment="", state=JobState.RUNNING, nodes="n3", gpus=1),
    ]
    up = view(jobs, [N1, N2, with_state(N3, "MIXED", used=3)])
    drained = view(jobs, [N1, N2, with_state(N3, "MIXED", "DRAIN", used=3)])
    # Up, job 100's k80s are the controller's to re-plan; the unmanaged job's is not.
    assert capacity(up) == {"k80": 3.0, "p100": 2.0, "v100": 2.0}
    assert capacity(drained) == {"k80": 0.0, "p100": 2.0, "v100": 2.0}
    assert [n.name for n in drained.snapshot.nodes] == ["n1", "n2", "n3"]
    n3 = drained.snapshot.nodes[2]
    assert not n3.available and n3.free_gpus("k80") == 0
    assert in_use(drained) == in_use(up) == {"n1": {"v100": 0}, "n2": {"p100": 0}, "n3": {"k80": 1}}
    assert drained.managed["100"].running
    assert [(j.key, j.num_gpus) for j in drained.snapshot.jobs] == [("100", 2)]
    assert drained.rejected == ()


@pytest.mark.parametrize(
    ("base", "flags"),
    [
        ("IDLE", ("DRAIN",)),
        ("MIXED", ("DRAIN",)),
        ("DOWN", ()),
        ("DOWN", ("NOT_RESPONDING",)),
        ("IDLE", ("FAIL",)),
        ("IDLE", ("RESERVED",)),
        ("IDLE", ("MAINTENANCE", "RESERVED")),
        ("IDLE", ("POWERED_DOWN",)),
        ("IDLE", ("POWERING_DOWN",)),
        ("IDLE", ("REBOOT_ISSUED",)),
        ("UNKNOWN", ()),
        ("FUTURE", ()),
    ],
)
def test_nodes_slurm_gives_no_new_jobs_offer_no_capacity(base: str, flags: tuple[str, ...]) -> None:
    v = view([held("200")], [N1, with_state(N3, base, *flags)])
    assert [(n.name, n.available) for n in v.snapshot.nodes] == [("n1", True), ("n3", False)]
    assert capacity(v) == {"k80": 0.0, "v100": 2.0}
    # The job waits for the GPUs that are left; it is not refused for the node's state.
    assert list(v.managed) == ["200"] and v.rejected == ()


@pytest.mark.parametrize(
    ("base", "flags"),
    [
        ("IDLE", ()),
        ("MIXED", ()),
        ("ALLOCATED", ()),
        ("MIXED", ("PLANNED",)),
        ("IDLE", ("COMPLETING",)),
    ],
)
def test_nodes_taking_jobs_offer_their_free_gpus(base: str, flags: tuple[str, ...]) -> None:
    v = view([held("210")], [with_state(N3, base, *flags, used=1)])
    assert v.snapshot.nodes[0].available and capacity(v) == {"k80": 3.0}


# ----------------------------------------------------------------------------------------------
# Partitions and QOS


def test_jobs_and_nodes_outside_the_managed_partitions_are_left_to_slurm() -> None:
    nodes = [
        N1,
        in_partitions(with_state(N2, "MIXED", used=1), "gpu", "low"),
        in_partitions(with_state(N3, "MIXED", used=1), "low"),
    ]
    jobs = [
        held("60", partition="low"),
        held("61", comment="hetsched:oops", partition="low"),  # not even refused
        running("62", "n3", "k80", partition="low"),
        running("63", "n2", "p100", partition="low"),  # on a node both partitions share
        held("64"),
        held("65", partition="low,gpu"),  # may run in either: placed in ours
    ]
    v = view(jobs, nodes, partitions=["gpu"])
    assert sorted(v.managed) == ["64", "65"] and v.rejected == ()
    assert [j.key for j in v.snapshot.jobs] == ["64", "65"]
    # n3 is only in "low": never planned onto, and its GPU type is not the controller's.
    assert [n.name for n in v.nodes] == [n.name for n in v.snapshot.nodes] == ["n1", "n2"]
    assert v.snapshot.gpu_types == ("p100", "v100")
    # Job 63 is Slurm's: its p100 stays in use.
    assert capacity(v) == {"p100": 1.0, "v100": 2.0}

    everything = view(jobs, nodes)
    assert sorted(everything.managed) == ["60", "62", "63", "64", "65"]
    assert [r.job_id for r in everything.rejected] == ["61"]
    assert capacity(everything) == {"k80": 4.0, "p100": 2.0, "v100": 2.0}


def test_several_managed_partitions() -> None:
    nodes = [in_partitions(N1, "a"), in_partitions(N2, "b"), in_partitions(N3, "c")]
    jobs = [held("70", partition="a"), held("71", partition="b"), held("72", partition="c")]
    v = view(jobs, nodes, partitions=("a", "b"))
    assert sorted(v.managed) == ["70", "71"]
    assert [n.name for n in v.snapshot.nodes] == ["n1", "n2"]


def test_only_jobs_of_the_managed_qos() -> None:
    jobs = [
        held("80", qos="normal"),
        held("81", qos="high"),
        held("82", comment="hetsched:oops", qos="normal"),  # not even refused
        held("83", qos="high", partition="low"),  # the partition is checked too
    ]
    v = view(jobs, [N1, N2, N3], qos=["high"], partitions=["gpu"])
    assert list(v.managed) == ["81"] and v.rejected == ()
    # All nodes stay plannable: QOS does not pick nodes.
    assert len(v.snapshot.nodes) == 3

    anything = view(jobs, [N1, N2, N3])
    assert sorted(anything.managed) == ["80", "81", "83"]
    assert [r.job_id for r in anything.rejected] == ["82"]
