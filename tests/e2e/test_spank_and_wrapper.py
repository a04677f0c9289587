"""The SPANK plugin and the wrapper together: options given to sbatch reach the training job.

`--hetsched-state-dir` makes the plugin's job prolog create the job's state folder and export
HETSCHED_STATE_DIR; `--hetsched-signal=USR1` becomes the wrapper's checkpoint signal. The job
gets no HETSCHED_* variable of its own, so everything it uses comes from the plugin.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend, JobOptions

from .conftest import STEPS, FakeController, Submitter, render_template, signal_time, wait_for


def test_plugin_options_set_the_wrappers_state_folder_and_signal(
    submit: Submitter, backend: CliSlurmBackend, tmp_path: Path
) -> None:
    root = tmp_path / "plugin-root"
    root.mkdir(mode=0o711)
    script = render_template(
        ["--steps", str(STEPS), "--seed", "0", "--step-time-s", "0.05"],
        comment=f"hetsched:class=LM (batch size 20);steps={STEPS}",
    )
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),  # the template's fallback root would be under here
        "HETSCHED_PYTHON": sys.executable,
        "HETSCHED_PROGRESS_EVERY_S": "0.5",
    }
    job = submit(
        script,
        JobOptions(
            export=environment,
            export_all=False,
            chdir=str(submit.folder),
            extra=(("hetsched-state-dir", str(root)), ("hetsched-signal", "USR1")),
        ),
    )
    controller = FakeController(backend, root)
    controller.place(job, "k80", "n3")
    progress = controller.wait_progress(job, min_step=20)
    assert (progress["node"], progress["gpu_type"]) == ("n3", "k80")

    folder = controller.state_dir(job)  # <root>/<uid>/<key>
    mode = folder.stat().st_mode
    assert stat.S_IMODE(mode) == 0o700 and folder.stat().st_uid == os.getuid()
    assert not (tmp_path / ".hetsched").exists(), "the template's fallback root was used"

    signalled = signal_time()
    backend.signal(job, "USR1")
    ack = controller.wait_ack(job, signalled)
    assert (folder / ack.checkpoint / "COMMITTED").is_file()
    assert wait_for(lambda: submit.job(job).state.value == "RUNNING", "paused job running")
