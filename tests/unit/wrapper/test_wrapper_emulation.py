"""The GPU speed emulation knob, and what the wrapper's modules import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from wrapper_fakes import FakeClock, make_env, no_gpus

from slurm_hetsched.wrapper.emulation import (
    StepStretch,
    build_step_stretch,
    class_from_comment,
    shipped_rates,
)
from slurm_hetsched.wrapper.session import JobSession

RATES = {"k80": 2.0, "p100": 6.0, "v100": 8.0}


def test_class_from_the_job_spec() -> None:
    comment = "hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1"
    assert class_from_comment(comment) == "ResNet-50 (batch size 64)"
    assert class_from_comment("just a comment") is None
    assert class_from_comment("hetsched:steps=3") is None


def test_stretch_is_the_ratio_to_the_fastest_type(tmp_path: Path) -> None:
    env = make_env(tmp_path, job_class="X")
    stretch = build_step_stretch(env, "k80", 1, rates=lambda c, n: RATES)
    assert stretch is not None and stretch.factor == pytest.approx(4.0)
    fastest = build_step_stretch(env, "v100", 1, rates=lambda c, n: RATES)
    assert fastest is not None and fastest.factor == 1.0
    slept: list[float] = []
    StepStretch(4.0, sleep=slept.append).after_step(0.5)
    assert slept == [pytest.approx(1.5)]


def test_class_comes_from_slurm_when_not_set(tmp_path: Path) -> None:
    asked: list[str | None] = []
    stretch = build_step_stretch(
        make_env(tmp_path),
        "p100",
        1,
        rates=lambda c, n: RATES,
        job_class=lambda job_id: asked.append(job_id) or "Y",
    )
    assert asked == ["42"] and stretch is not None


@pytest.mark.parametrize("gpu_type", ["unknown", "a100"])
def test_emulation_turns_itself_off_when_the_table_cannot_say(
    tmp_path: Path, gpu_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(tmp_path, job_class="X")
    assert build_step_stretch(env, gpu_type, 1, rates=lambda c, n: RATES) is None
    assert "EMULATION off" in caplog.text
    assert build_step_stretch(make_env(tmp_path), "k80", 1, job_class=lambda j: None) is None


def test_shipped_table() -> None:
    rates = shipped_rates("LM (batch size 20)", 1)
    assert set(rates) >= {"k80", "p100", "v100"} and max(rates, key=rates.__getitem__) == "v100"


def test_session_stretches_steps(tmp_path: Path) -> None:
    clock = FakeClock()
    env = make_env(tmp_path, emulate_gpu_speed=True, job_class="LM (batch size 20)")
    (tmp_path).mkdir(exist_ok=True)
    (tmp_path / "placement.json").write_text('{"gpu_type": "k80", "nodes": ["n3"]}')
    stretched: list[float] = []
    session = JobSession(
        total_steps=3,
        env=env,
        gpu_lookup=no_gpus,
        clock=clock.monotonic,
        wall=clock.wall,
        sleep=clock.sleep,
    )
    with session:
        assert session.gpu_type == "k80" and session._stretch is not None
        session._stretch._sleep = stretched.append
        for _ in range(3):
            clock.advance(0.1)
            session.step_done()
    factor = 64.74245099960703 / 17.142289692304086  # Gavel: LM (batch size 20), v100 / k80
    assert stretched == [pytest.approx(0.1 * (factor - 1))] * 3


def _imported(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(*sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(done.stdout.split())


def test_generic_wrapper_needs_only_the_standard_library() -> None:
    modules = _imported("import slurm_hetsched.wrapper")
    assert not {m for m in modules if m.split(".")[0] in ("torch", "numpy", "cvxpy")}


def test_wrapper_never_imports_solvers_or_policies() -> None:
    modules = _imported(
        "import slurm_hetsched.wrapper.torch\n"
        "from slurm_hetsched.wrapper.emulation import shipped_rates\n"
        "shipped_rates('A3C', 1)"
    )
    assert "cvxpy" not in {m.split(".")[0] for m in modules}
    assert not {
        m
        for m in modules
        if m.startswith(("slurm_hetsched.core.policies", "slurm_hetsched.controller"))
    }
