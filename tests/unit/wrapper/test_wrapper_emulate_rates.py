"""HETSCHED_EMULATE_RATES: the speeds the emulation stretches steps by, instead of the table's."""

from __future__ import annotations

from pathlib import Path

import pytest
from wrapper_fakes import FakeClock, make_env, no_gpus

from slurm_hetsched.wrapper.emulation import build_step_stretch
from slurm_hetsched.wrapper.env import JobEnvironment, WrapperConfigError, parse_emulate_rates
from slurm_hetsched.wrapper.session import JobSession

RATES = (("v100", 3.0), ("p100", 2.0), ("k80", 1.0))


def test_rates_are_parsed_in_order_with_blanks_allowed() -> None:
    assert parse_emulate_rates(" v100=3, p100 = 2 ,k80=1 ") == RATES
    assert parse_emulate_rates("a100-80gb=1.5e1,t4=.5") == (("a100-80gb", 15.0), ("t4", 0.5))
    assert parse_emulate_rates("") is None and parse_emulate_rates("  ") is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("v100", "is not TYPE=SPEED"),
        ("v100=3,", "is not TYPE=SPEED"),
        ("=3", "is not TYPE=SPEED"),
        ("v 100=3", "is not TYPE=SPEED"),
        ("v100=3;k80=1", "'3;k80=1'"),
        ("v100=3,v100=2", "given twice"),
        ("v100=0", "each speed > 0"),
        ("v100=-1", "each speed > 0"),
        ("v100=nan", "each speed > 0"),
        ("v100=inf", "each speed > 0"),
        ("v100=1_0", "each speed > 0"),
        ("v100=\u0663", "each speed > 0"),  # an Arabic-Indic digit: float() would take it
        ("v100=2e9", "each speed > 0"),
        ("v100=", "each speed > 0"),
        (",".join(f"t{i}=1" for i in range(65)), "more than 64 GPU types"),
        ("v100=" + "1" * 5000, "longer than 4096 characters"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(value: str, says: str) -> None:
    with pytest.raises(WrapperConfigError, match="HETSCHED_EMULATE_RATES") as raised:
        parse_emulate_rates(value)
    assert says in str(raised.value)


def test_the_environment_carries_the_rates_only_with_the_knob_on() -> None:
    base = {"SLURM_JOB_ID": "7", "HETSCHED_STATE_DIR": "/nonexistent/7"}
    env = JobEnvironment.from_environ(
        {**base, "HETSCHED_EMULATE_GPU_SPEED": "1", "HETSCHED_EMULATE_RATES": "v100=3,k80=1"}
    )
    assert env.emulate_gpu_speed and env.emulate_rates == (("v100", 3.0), ("k80", 1.0))
    assert JobEnvironment.from_environ(base).emulate_rates is None
    with pytest.raises(WrapperConfigError, match="HETSCHED_EMULATE_GPU_SPEED is not 1"):
        JobEnvironment.from_environ({**base, "HETSCHED_EMULATE_RATES": "v100=3"})


def test_rates_replace_the_table_and_need_no_class(tmp_path: Path) -> None:
    env = make_env(tmp_path, emulate_gpu_speed=True, emulate_rates=RATES)

    def no_table(job_class: str, num_gpus: int) -> dict[str, float]:
        raise AssertionError("the table must not be read")

    def no_class(job_id: str | None) -> str | None:
        raise AssertionError("the class must not be asked for")

    for gpu_type, factor in (("v100", 1.0), ("p100", 1.5), ("k80", 3.0)):
        stretch = build_step_stretch(env, gpu_type, 4, rates=no_table, job_class=no_class)
        assert stretch is not None and stretch.factor == pytest.approx(factor)


def test_a_type_the_rates_do_not_name_turns_the_emulation_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(tmp_path, emulate_gpu_speed=True, emulate_rates=RATES)
    assert build_step_stretch(env, "a100", 1) is None
    assert "EMULATION off" in caplog.text and "HETSCHED_EMULATE_RATES" in caplog.text


def test_session_stretches_steps_by_the_given_rates(tmp_path: Path) -> None:
    clock = FakeClock()
    env = make_env(tmp_path, emulate_gpu_speed=True, emulate_rates=RATES)
    (tmp_path / "placement.json").write_text('{"gpu_type": "p100", "nodes": ["n3"]}')
    stretched: list[float] = []
    session = JobSession(
        total_steps=2,
        env=env,
        gpu_lookup=no_gpus,
        clock=clock.monotonic,
        wall=clock.wall,
        sleep=clock.sleep,
    )
    with session:
        assert session._stretch is not None
        session._stretch._sleep = stretched.append
        for _ in range(2):
            clock.advance(0.2)
            session.step_done()
    assert stretched == [pytest.approx(0.2 * (1.5 - 1))] * 2
