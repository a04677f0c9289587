"""The Slurm backend against the real dev cluster (n1 = 2 x v100, n2 = 2 x p100, n3 = 4 x k80)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetsched.errors import InvalidRequestError, UnknownJobError
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, JobState, JobUpdate

from .conftest import Submitter, read_when, wait_for

# Prints where the job runs and which GPUs it sees, then ends.
WHERE_SCRIPT = """#!/bin/bash
echo "node=$SLURMD_NODENAME job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0} \
cuda=$CUDA_VISIBLE_DEVICES job_gpus=$SLURM_JOB_GPUS"
"""

# Logs every start (node, restart count, GPUs) and every signal, and runs until stopped.
LONG_SCRIPT = """#!/bin/bash
log="${HETSCHED_TEST_LOG:?}"
echo "start node=$SLURMD_NODENAME job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0} \
cuda=$CUDA_VISIBLE_DEVICES" >> "$log"
for sig in USR1 USR2; do trap "echo got $sig >> '$log'" $sig; done
for i in $(seq 1 1200); do sleep 0.5 & wait $!; done
"""

NEVER_FITS = 9  # more GPUs than any dev cluster node has


def parse_where(text: str) -> dict[str, str]:
    line = [row for row in text.splitlines() if row.startswith("node=")][-1]
    return dict(part.split("=", 1) for part in line.split())


def long_job(log: Path) -> str:
    return LONG_SCRIPT.replace("${HETSCHED_TEST_LOG:?}", str(log))


@pytest.mark.parametrize(
    ("gpu_type", "count", "node"), [("v100", 2, "n1"), ("p100", 1, "n2"), ("k80", 4, "n3")]
)
def test_typed_gpu_job_lands_on_a_node_of_its_type(
    submit: Submitter, tmp_path: Path, gpu_type: str, count: int, node: str
) -> None:
    job_id = submit(
        WHERE_SCRIPT, JobOptions(job_name=f"typed-{gpu_type}", gpus=GpuRequest(count, gpu_type))
    )
    where = parse_where(read_when(tmp_path / f"slurm-{job_id}.out", "node="))
    assert where["node"] == node
    assert len(where["cuda"].split(",")) == count
    job = submit.job(job_id)
    assert job.nodes == node
    assert job.gpus_per_node == GpuRequest(count, gpu_type)


def test_untyped_request_with_a_constraint_lands_on_that_type(
    submit: Submitter, tmp_path: Path
) -> None:
    # How managed jobs are submitted on 22.05: untyped count, GPU type as a node feature.
    job_id = submit(WHERE_SCRIPT, JobOptions(gpus=GpuRequest(2), constraint="k80"))
    where = parse_where(read_when(tmp_path / f"slurm-{job_id}.out", "node="))
    assert where["node"] == "n3"
    assert len(where["cuda"].split(",")) == 2
    assert submit.job(job_id).gpus_per_node == GpuRequest(2, None)


def test_requeue_hold_retarget_release_moves_a_job_from_k80_to_v100(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    log = tmp_path / "moves.log"
    job_id = submit(
        long_job(log),
        JobOptions(
            job_name="mover",
            gpus=GpuRequest(2),
            constraint="k80",
            requeue=True,
            open_mode_append=True,
        ),
    )
    read_when(log, "start node=n3")
    assert submit.job(job_id).state is JobState.RUNNING

    backend.requeue_hold(job_id)
    held = wait_for(lambda: (j := submit.job(job_id)).held and j, f"job {job_id} held")
    assert held.state is JobState.PENDING

    backend.retarget(job_id, "v100", 2, nodes="n1")
    retargeted = submit.job(job_id)
    assert (retargeted.features, retargeted.required_nodes) == ("v100", "n1")
    assert retargeted.gpus_per_node == GpuRequest(2, None)

    backend.release(job_id)
    backend.update(job_id, JobUpdate(start_now=True))  # skip the requeue delay (cred_expire)
    text = read_when(log, "start node=n1")
    starts = [
        dict(p.split("=", 1) for p in row.split()[1:])
        for row in text.splitlines()
        if row.startswith("start")
    ]
    assert [s["node"] for s in starts] == ["n3", "n1"]
    assert [s["restart"] for s in starts] == ["0", "1"]
    assert {s["job"] for s in starts} == {job_id}
    assert len(starts[1]["cuda"].split(",")) == 2
    moved = submit.wait_state(job_id, "RUNNING")
    assert (moved.nodes, moved.restart_count) == ("n1", 1)


def test_heterogeneous_job_gets_different_gres_per_component(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    script = """#!/bin/bash
echo "node=$SLURMD_NODENAME het_size=$SLURM_HET_SIZE group0=$SLURM_JOB_NODELIST_HET_GROUP_0 \
group1=$SLURM_JOB_NODELIST_HET_GROUP_1 cuda=$CUDA_VISIBLE_DEVICES"
srun --het-group=1 bash -c 'echo "step1 node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES"'
sleep 600
"""
    job_id = submit(
        script,
        JobOptions(job_name="het", nodes=1, gpus=GpuRequest(1, "p100"), nodelist="n2"),
        JobOptions(nodes=1, gpus=GpuRequest(2, "k80"), nodelist="n3"),
    )
    text = read_when(tmp_path / f"slurm-{job_id}.out", "step1")
    batch = parse_where(text)
    assert (batch["node"], batch["het_size"], batch["group0"], batch["group1"]) == (
        "n2",
        "2",
        "n2",
        "n3",
    )
    assert len(batch["cuda"].split(",")) == 1
    step = dict(p.split("=", 1) for p in text.split("step1 ", 1)[1].split())
    assert step["node"] == "n3" and len(step["cuda"].split(",")) == 2

    components = sorted(
        (j for j in backend.list_jobs() if j.het_job_id == job_id),
        key=lambda j: j.het_job_offset or 0,
    )
    assert [c.slurm_id for c in components] == [f"{job_id}+0", f"{job_id}+1"]
    assert [c.nodes for c in components] == ["n2", "n3"]
    assert [c.gpus_per_node for c in components] == [GpuRequest(1, "p100"), GpuRequest(2, "k80")]


def test_admin_comment_is_written_and_read_back(
    submit: Submitter, backend: CliSlurmBackend
) -> None:
    job_id = submit(WHERE_SCRIPT, JobOptions(gpus=GpuRequest(1), constraint="v100", hold=True))
    text = "hetsched r=42 v100x2@n1 share=v100:.61,p100:.39 prio=1.8 moved:faster-on-v100"
    backend.set_admin_comment(job_id, text)
    assert submit.job(job_id).admin_comment == text


def test_comment_with_spaces_parentheses_and_semicolons_arrives_intact(
    submit: Submitter,
) -> None:
    spec = "hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1;note=$(touch /tmp/x)"
    job_id = submit(
        WHERE_SCRIPT, JobOptions(gpus=GpuRequest(1), constraint="p100", hold=True, comment=spec)
    )
    assert submit.job(job_id).comment == spec


def test_pending_job_fields_can_be_updated(submit: Submitter, backend: CliSlurmBackend) -> None:
    # Pending (not held) until an hour from now, so the job stays put while we change it.
    job_id = submit(
        WHERE_SCRIPT,
        JobOptions(gpus=GpuRequest(1), constraint="k80", extra=(("begin", "now+3600"),)),
    )
    backend.update(job_id, JobUpdate(features="p100", excluded_nodes="n1", priority=1234))
    job = submit.job(job_id)
    assert (job.state, job.features, job.excluded_nodes, job.priority) == (
        JobState.PENDING,
        "p100",
        "n1",
        1234,
    )
    backend.update(job_id, JobUpdate(excluded_nodes=""))
    assert submit.job(job_id).excluded_nodes == ""


def test_priority_of_a_held_job_cannot_be_changed(
    submit: Submitter, backend: CliSlurmBackend
) -> None:
    # Slurm refuses a priority change while a job is held; the controller must not try.
    job_id = submit(WHERE_SCRIPT, JobOptions(gpus=GpuRequest(1), constraint="k80", hold=True))
    with pytest.raises(InvalidRequestError):
        backend.update(job_id, JobUpdate(priority=1234))
    assert submit.job(job_id).held


def test_signal_reaches_the_batch_shell(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    log = tmp_path / "signals.log"
    job_id = submit(long_job(log), JobOptions(gpus=GpuRequest(1), constraint="p100"))
    read_when(log, "start node=n2")
    backend.signal(job_id, "USR2")
    read_when(log, "got USR2")
    assert submit.job(job_id).state is JobState.RUNNING


def test_released_job_runs_and_cancel_ends_it(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    log = tmp_path / "released.log"
    job_id = submit(long_job(log), JobOptions(gpus=GpuRequest(1), constraint="v100", hold=True))
    assert submit.job(job_id).held
    backend.release(job_id)
    read_when(log, "start node=n1")
    backend.cancel(job_id)
    job = submit.wait_state(job_id, "CANCELLED")
    assert not job.state.is_active


def test_batch_script_is_submitted_from_text_and_read_back(
    submit: Submitter, backend: CliSlurmBackend
) -> None:
    job_id = submit(WHERE_SCRIPT, JobOptions(gpus=GpuRequest(1), constraint="k80", hold=True))
    assert backend.write_batch_script(job_id) == WHERE_SCRIPT


def test_nodes_report_gpu_types_use_and_features(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    log = tmp_path / "busy.log"
    submit(long_job(log), JobOptions(gpus=GpuRequest(3, "k80")))
    read_when(log, "start node=n3")
    nodes = {n.name: n for n in backend.list_nodes()}
    assert {name: dict(n.gpus) for name, n in nodes.items()} == {
        "n1": {"v100": 2},
        "n2": {"p100": 2},
        "n3": {"k80": 4},
    }
    assert nodes["n3"].gpus_used == {"k80": 3}
    assert nodes["n3"].gpus_free == {"k80": 1}
    assert {n.features for n in nodes.values()} == {("v100",), ("p100",), ("k80",)}
    assert all(n.available for n in nodes.values())


def test_unknown_job_id_gives_the_typed_error(backend: CliSlurmBackend) -> None:
    for action in (
        lambda: backend.update("999999", JobUpdate(priority=5)),
        lambda: backend.release("999999"),
        lambda: backend.requeue_hold("999999"),
        lambda: backend.cancel("999999"),
        lambda: backend.signal("999999", "USR2"),
        lambda: backend.list_jobs(["999999"]),
    ):
        with pytest.raises(UnknownJobError) as caught:
            action()
        assert "999999" in " ".join(caught.value.argv)


def test_invalid_gres_gives_the_typed_error(submit: Submitter) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        submit(WHERE_SCRIPT, JobOptions(gpus=GpuRequest(1, "nosuchtype")))
    assert caught.value.argv[0] == "sbatch" and caught.value.stderr
    with pytest.raises(InvalidRequestError):
        submit(WHERE_SCRIPT, JobOptions(gpus=GpuRequest(NEVER_FITS)))


def test_updating_a_running_job_type_is_refused(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    log = tmp_path / "running.log"
    job_id = submit(long_job(log), JobOptions(gpus=GpuRequest(1), constraint="k80"))
    read_when(log, "start node=n3")
    with pytest.raises(InvalidRequestError):
        backend.update(job_id, JobUpdate(features="v100"))


def test_export_passes_only_the_given_variables(
    submit: Submitter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a re-submission needs: the job key, not the submitter's (root's) environment.
    monkeypatch.setenv("SUBMITTER_ONLY", "leaked")
    script = "#!/bin/bash\necho \"key=$HETSCHED_JOB_KEY other=${SUBMITTER_ONLY:-unset}\"\n"
    job_id = submit(script, JobOptions(gpus=GpuRequest(1), constraint="k80",
                                       export={"HETSCHED_JOB_KEY": "key-42"}, export_all=False))
    text = read_when(tmp_path / f"slurm-{job_id}.out", "key=")
    assert "key=key-42 other=unset" in text
