"""`hetsched profile`'s command line: what it hands the profile, and its errors (no Slurm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import slurm_hetsched.profiling.run
from slurm_hetsched.cli import main
from slurm_hetsched.profiling.plan import ProfileRequest


def test_the_options_become_the_request(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[ProfileRequest] = []

    def fake_run(request: ProfileRequest, backend: Any, **kwargs: Any) -> list[Any]:
        seen.append(request)
        return []

    monkeypatch.setattr(slurm_hetsched.profiling.run, "run_profile", fake_run)
    code = main(
        [
            "profile",
            "--class",
            "ResNet-50 (batch size 64)",
            "--output",
            str(tmp_path / "p.json"),
            "--gpu-types",
            "v100,k80",
            "--gpus",
            "1,2",
            "--steps",
            "150",
            "--partition",
            "gpu",
            "--timeout",
            "90",
            "--export-env",
            "HETSCHED_EMULATE_GPU_SPEED=1",
            "--export-env",
            "HETSCHED_EMULATE_RATES=v100=3,k80=1",
            "--workdir",
            str(tmp_path),
            "--",
            "python",
            "train.py",
            "--steps",
            "{steps}",
        ]
    )
    assert code == 0
    (request,) = seen
    assert request.job_class == "ResNet-50 (batch size 64)"
    assert request.command == ("python", "train.py", "--steps", "{steps}")
    assert (request.gpu_types, request.gpu_counts, request.steps) == (("v100", "k80"), (1, 2), 150)
    assert (request.partition, request.timeout_s, request.workdir) == ("gpu", 90.0, tmp_path)
    assert request.export == {
        "HETSCHED_EMULATE_GPU_SPEED": "1",
        "HETSCHED_EMULATE_RATES": "v100=3,k80=1",
    }


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--", "python", "train.py"], "must contain {steps}"),
        ([], "no training command"),
        (["--gpus", "0", "--", "t", "{steps}"], "--gpus '0'"),
        (["--export-env", "NOVALUE", "--", "t", "{steps}"], "KEY=VALUE"),
        (["--workdir", "/nonexistent/folder", "--", "t", "{steps}"], "not a folder"),
        (["--timeout", "-1", "--", "t", "{steps}"], "--timeout -1"),
    ],
)
def test_bad_options_are_errors_before_slurm_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    code = main(["profile", "--class", "m", "--output", str(tmp_path / "p.json"), *extra])
    assert code == 1
    assert says in capsys.readouterr().err
