"""`hetsched profile` on the dev cluster (n1 = 2 x v100, n2 = 2 x p100, n3 = 4 x k80): with the
emulation knob set to known speeds, the table it writes has the emulated ratios.

The training loop is examples/train_plain.py padded to a fixed 30 ms per step, so a step's
time is the pad times the emulation's stretch rather than CPU work, and the ratios hold with
every core busy. The rates are the wrapper's own (steps over training time), never the wall
clock of this test. Each job trains 200 steps: about 6 s on the v100, 18 s on the k80.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from slurm_hetsched.data_files import load_throughputs
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest

REPO = Path(__file__).resolve().parents[2]
SPEEDS = {"v100": 3.0, "p100": 2.0, "k80": 1.0}
TOLERANCE = 0.10
CLASS = "emulated model (batch size 8)"


def test_profile_writes_the_emulated_ratios(
    slurm_conf: str, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    output = tmp_path / "profile.json"
    kept = {"other class": {"1": {"v100": 7.0}}}
    output.write_text(
        json.dumps({"format": "hetsched-throughputs/1", "source": "earlier", "throughputs": kept})
    )
    rates = ",".join(f"{t}={s:g}" for t, s in SPEEDS.items())
    command = [
        *(sys.executable, "-m", "slurm_hetsched.cli", "profile"),
        *("--class", CLASS, "--output", str(output), "--workdir", str(tmp_path)),
        *("--gpu-types", ",".join(SPEEDS), "--gpus", "1", "--steps", "200", "--timeout", "240"),
        *("--export-env", "HETSCHED_EMULATE_GPU_SPEED=1"),
        *("--export-env", f"HETSCHED_EMULATE_RATES={rates}"),
        *("--", sys.executable, "examples/train_plain.py", "--steps", "{steps}"),
        *("--step-time-s", "0.03"),
    ]
    done = subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, "SLURM_CONF": slurm_conf, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    data = json.loads(output.read_text())
    measured = data["throughputs"][CLASS]["1"]
    assert set(measured) == set(SPEEDS)
    errors = {}
    for gpu_type, speed in SPEEDS.items():
        expected = speed / SPEEDS["v100"]
        errors[gpu_type] = measured[gpu_type] / measured["v100"] / expected - 1
    print(f"measured steps/s {measured}; ratio errors {errors}")
    assert all(abs(e) < TOLERANCE for e in errors.values()), (errors, done.stdout)

    # Merged: the other class is kept; the controller's site.throughputs loads the file.
    assert data["throughputs"]["other class"] == kept["other class"]
    assert data["source"] == "earlier"
    assert load_throughputs(output).steps_per_s(CLASS, "k80", 1) == measured["k80"]

    # Typed GRES, no hetsched comment: Slurm's jobs, which the controller leaves alone.
    submitted = dict(re.findall(r"^submitted job (\d+): (\S+) x1$", done.stdout, re.MULTILINE))
    assert sorted(submitted.values()) == sorted(SPEEDS)
    for job_id, gpu_type in submitted.items():
        job = backend.job(job_id)
        assert job.gpus_per_node == GpuRequest(1, gpu_type) and job.comment == ""
        assert job.nodes == {"v100": "n1", "p100": "n2", "k80": "n3"}[gpu_type]
