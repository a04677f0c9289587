"""The merge helper as the controller runs it, a process of its own: killed in the middle of its
write it leaves no committed half checkpoint and the next merge succeeds; run as root without
--allow-root it refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fork_helpers import load_merged, two_copies

HELPER = [sys.executable, "-m", "slurm_hetsched.wrapper.merge"]


def argv(key: Path, step: int, copies: tuple[str, str]) -> list[str]:
    out = [*HELPER, "--key-dir", str(key), "--out-step", str(step)]
    for item in copies:
        out += ["--copy", item]
    return out


def test_a_merge_killed_mid_write_leaves_no_committed_half_and_the_next_succeeds(
    tmp_path: Path,
) -> None:
    key = tmp_path / "42"
    copies = two_copies(key)
    env = {**os.environ, "HETSCHED_TEST_MERGE_STALL_S": "120"}
    process = subprocess.Popen(
        [*argv(key, 140, copies), "--allow-root"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # a bound for a stuck helper, not a timing check
        written: list[Path] = []
        while not written and process.poll() is None and time.monotonic() < deadline:
            written = list((key / "merged").glob(".tmp-ckpt-140-*/state.bin"))
            time.sleep(0.05)
        assert written, f"the helper never stalled mid-write: {process.communicate()}"
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (key / "merged" / "ckpt-140").exists(), "no committed half checkpoint"
    assert written[0].parent.exists(), "only the temporary folder is left"

    again = subprocess.run(
        [*argv(key, 140, copies), "--allow-root"], capture_output=True, text=True, check=False
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["merged"] == "merged/ckpt-140"
    assert [p.name for p in (key / "merged").iterdir()] == ["ckpt-140"], "temporary one pruned"
    assert load_merged(key, 140)["model"]["w"].tolist() == [1.75, 3.5]


@pytest.mark.skipif(os.geteuid() != 0, reason="the helper's own root check needs root")
def test_run_as_root_the_helper_refuses_without_allow_root(tmp_path: Path) -> None:
    key = tmp_path / "42"
    result = subprocess.run(
        argv(key, 140, two_copies(key)), capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "refusing to run as root" in json.loads(result.stdout)["error"]
    assert "refusing to run as root" in result.stderr
    assert not (key / "merged").exists()
