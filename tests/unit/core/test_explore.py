"""Exploration stints (core/explore.py): which type a job is measured on next, when a stint is
given up, and how the problem keeps an exploring job's row on its stint's type."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_hetsched.core.explore import (
    ExploreSettings,
    Stint,
    after_round,
    candidate_types,
    next_stints,
    restrict_to_targets,
    usable_types,
)
from slurm_hetsched.core.model import GpuSlice, GpuType, Job, Placement
from slurm_hetsched.core.throughput.prior import with_estimates, without
from slurm_hetsched.data_files import shipped_gpu_types, shipped_throughputs

CATALOG = shipped_gpu_types()
TYPES = ("k80", "p100", "v100")
ROOM = {"k80": 4.0, "p100": 4.0, "v100": 4.0}
NO_TABLE = with_estimates(without(shipped_throughputs(), every=True), CATALOG)
SETTINGS = ExploreSettings(rounds_per_type=2)


def new_job(key: str = "j", **kwargs: object) -> Job:
    return Job(key, "my-own-model", steps_remaining=100.0, **kwargs)  # type: ignore[arg-type]


def stints(jobs: list[Job], previous: dict[str, Stint] | None = None) -> dict[str, Stint]:
    return next_stints(jobs, NO_TABLE, TYPES, ROOM, CATALOG, previous or {}, SETTINGS)


def test_stints_go_most_promising_first_and_skip_what_is_measured() -> None:
    order = candidate_types(new_job(), NO_TABLE, TYPES, ROOM, CATALOG)
    assert order == ["v100", "p100", "k80"]  # by the figures: fastest first
    assert stints([new_job()]) == {"j": Stint("v100")}
    measured = new_job(measured_steps_per_s={"v100": 3.0})
    assert stints([measured]) == {"j": Stint("p100")}
    done = new_job(measured_steps_per_s={"v100": 3.0, "p100": 2.0, "k80": 1.0})
    assert stints([done]) == {}


def test_what_a_job_cannot_use_is_never_a_stint() -> None:
    # Room for 2 GPUs of k80 only, a 4-GPU job: k80 cannot take it.
    room = {"k80": 2.0, "p100": 4.0, "v100": 4.0}
    wide = Job("w", "my-own-model", num_gpus=4, steps_remaining=1.0)
    assert candidate_types(wide, NO_TABLE, TYPES, room, CATALOG) == ["v100", "p100"]
    # Memory: a need above the V100's 32 GiB rules it out (and so exploring it).
    big = new_job(mem_gib=40.0)
    assert "v100" not in candidate_types(big, NO_TABLE, TYPES, ROOM, CATALOG)
    # Measured at 0 (known not to run there): out.
    zero = new_job(measured_steps_per_s={"k80": 0.0})
    assert "k80" not in candidate_types(zero, NO_TABLE, TYPES, ROOM, CATALOG)
    # One usable type: nothing to choose, nothing to explore.
    assert candidate_types(new_job(), NO_TABLE, ("v100",), ROOM, CATALOG) == []


def test_a_known_class_explores_only_its_estimated_columns() -> None:
    table = with_estimates(without(shipped_throughputs(), ["k80"]), CATALOG)
    job = Job("r", "ResNet-50 (batch size 64)", steps_remaining=1.0)
    assert candidate_types(job, table, TYPES, ROOM, CATALOG) == ["k80"]
    full = with_estimates(shipped_throughputs(), CATALOG)
    assert candidate_types(job, full, TYPES, ROOM, CATALOG) == []


def test_a_stint_waited_too_long_for_is_given_up() -> None:
    job = new_job()
    first = stints([job])["j"]
    # Not placed while p100 had room: one round waited.
    waited = after_round({"j": first}, [job], {}, {"p100": 1.0}, NO_TABLE, TYPES, ROOM, CATALOG)
    assert waited["j"] == Stint("v100", 1)
    # Not placed in a full cluster: nothing counted.
    full = after_round({"j": first}, [job], {}, {}, NO_TABLE, TYPES, ROOM, CATALOG)
    assert full["j"] == first
    # Placed on its type: nothing counted (it is measured there next round).
    on_target = {"j": Placement("j", (GpuSlice("n1", "v100", 1),))}
    placed = after_round(
        {"j": first}, [job], on_target, {"p100": 4.0}, NO_TABLE, TYPES, ROOM, CATALOG
    )
    assert placed["j"] == first
    # Placed elsewhere (work conservation filled an idle k80 with it): it waited a round.
    elsewhere = {"j": Placement("j", (GpuSlice("n3", "k80", 1),))}
    filled = after_round({"j": first}, [job], elsewhere, {}, NO_TABLE, TYPES, ROOM, CATALOG)
    assert filled["j"] == Stint("v100", 1)
    again = stints([job], {"j": Stint("v100", 1)})
    assert again["j"] == Stint("v100", 1)
    given_up = stints([job], {"j": Stint("v100", 2)})
    assert given_up["j"] == Stint("p100", 0, ("v100",))
    # Every type given up or measured: the job no longer explores.
    last = stints([job], {"j": Stint("k80", 2, ("p100", "v100"))})
    assert last == {}


def test_exploration_can_be_turned_off() -> None:
    off = ExploreSettings(enabled=False)
    assert next_stints([new_job()], NO_TABLE, TYPES, ROOM, CATALOG, {}, off) == {}


@pytest.mark.parametrize("text", ["", "v100", "v100;x;", ";1;", "v100;1", "a;b;c;d", "v100;-1;"])
def test_a_stint_read_back_from_the_journal_is_checked(text: str) -> None:
    assert Stint.from_text(text) is None


def test_a_stint_round_trips_through_text() -> None:
    stint = Stint("k80", 2, ("p100", "v100"))
    assert Stint.from_text(stint.to_text()) == stint
    assert Stint.from_text(Stint("v100").to_text()) == Stint("v100")


def test_restrict_keeps_an_exploring_row_on_its_type_only() -> None:
    throughput = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = restrict_to_targets(throughput, ("a", "b"), TYPES, {"b": "p100"})
    assert out.tolist() == [[1.0, 2.0, 3.0], [0.0, 5.0, 0.0]]
    assert throughput[1].tolist() == [4.0, 5.0, 6.0]  # the input is left alone
    assert restrict_to_targets(throughput, ("a", "b"), TYPES, {}) is throughput


def test_a_type_without_memory_size_is_not_ruled_out() -> None:
    catalog = {**CATALOG, "v100": GpuType("v100", fp16_tflops=125.0, mem_bw_gbs=900.0)}
    big = new_job(mem_gib=1000.0)
    assert usable_types(big, NO_TABLE, TYPES, ROOM, catalog) == ["v100"]
    assert usable_types(big, NO_TABLE, TYPES, ROOM, CATALOG) == []
