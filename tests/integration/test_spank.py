"""The SPANK plugin (spank/hetsched_spank.c) on the real dev cluster.

The cluster must have been started with the plugin registered (`make up`, or
`hetsched devcluster up --spank spank/hetsched_spank.so`). Jobs run on the host, so the state
roots of these tests are plain temporary folders. A job's state folder is
<root>/<uid>/<job key>; tests that need jobs of other users than root create two system users
(`useradd --system`, tests/users.py; needs root).
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hetsched.errors import SlurmCommandError
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, SlurmCli

from ..conftest import ROOT, in_ci
from ..users import ALICE, BOB, ensure_user
from .conftest import Submitter, read_when, wait_for

VARIABLES = (
    "HETSCHED_SIGNAL",
    "HETSCHED_STATE_ROOT",
    "HETSCHED_STATE_DIR",
    "HETSCHED_LEASE_TIMEOUT_S",
)

# Prints the plugin's variables as the batch script and a job step see them, and the state
# folder as the job's user sees it.
ENV_SCRIPT = """#!/bin/bash
for v in HETSCHED_SIGNAL HETSCHED_STATE_ROOT HETSCHED_STATE_DIR HETSCHED_LEASE_TIMEOUT_S; do
    echo "$v=${!v-<unset>}"
done
echo "uid=$(id -u)"
[ -n "$HETSCHED_STATE_DIR" ] && echo "folder=$(stat -c '%a %u' "$HETSCHED_STATE_DIR" 2>&1)"
echo "step_dir=$(srun -n1 printenv HETSCHED_STATE_DIR)"
echo "done"
"""


def parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def run_and_read(submit: Submitter, options: JobOptions) -> tuple[str, dict[str, str]]:
    """Submit ENV_SCRIPT, wait for it to finish, return its id and what it printed."""
    job_id = submit(ENV_SCRIPT, options)
    text = read_when(submit.folder / f"slurm-{job_id}.out", "done", timeout_s=30)
    return job_id, parse_env(text)


def state_dir(root: Path, uid: int | str, key: str) -> Path:
    """Where the plugin puts a job's state folder: <root>/<uid>/<job key>."""
    return root / str(uid) / key


def spank_options(root: Path | str, **more: str) -> tuple[tuple[str, str], ...]:
    """sbatch options of the plugin: --hetsched-state-dir=root and --hetsched-<name>=value."""
    more_options = [(f"hetsched-{name}", value) for name, value in more.items()]
    return (("hetsched-state-dir", str(root)), *more_options)


@pytest.fixture(scope="session")
def sbatch_help(slurm_conf: str) -> str:
    """`sbatch --help` of the cluster; skips (fails under CI) if the plugin is not registered."""
    done = subprocess.run(
        ["sbatch", "--help"],
        env=dict(os.environ, SLURM_CONF=slurm_conf),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if "--hetsched-signal" not in done.stdout:
        message = (
            "the SPANK plugin is not registered in this cluster's plugstack.conf: start it with "
            "`make up` or `hetsched devcluster up --spank spank/hetsched_spank.so`"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return done.stdout


@pytest.fixture
def root(sbatch_help: str, tmp_path: Path) -> Path:
    """A fresh state root."""
    folder = tmp_path / "state"
    folder.mkdir()
    return folder


@pytest.fixture
def shared(sbatch_help: str) -> Iterator[Path]:
    """A folder other users can reach: `state/` as docs/spank.md asks (root's, mode 0711) and
    `out/` for job output (writable by all, sticky)."""
    folder = Path(tempfile.mkdtemp(prefix="hetsched-spank-"))
    try:
        folder.chmod(0o755)
        for name, mode in (("state", 0o711), ("out", 0o1777)):
            (folder / name).mkdir()
            (folder / name).chmod(mode)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def owner_and_mode(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, stat.S_IMODE(info.st_mode)


def submit_as(
    submit: Submitter, user: pwd.struct_passwd, out: Path, options: JobOptions
) -> tuple[str, dict[str, str]]:
    """Submit ENV_SCRIPT as `user` (we are root), wait for it, return its id and output."""
    options = dataclasses.replace(options, output=str(out / "slurm-%j.out"))
    job_id = submit.backend.submit(ENV_SCRIPT, [options], uid=user.pw_uid, gid=user.pw_gid)
    submit.job_ids.append(job_id)  # cancelled after the test like the others
    text = read_when(out / f"slurm-{job_id}.out", "done", timeout_s=30)
    return job_id, parse_env(text)


def test_plugin_builds_without_warnings(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or not Path("/usr/include/slurm/spank.h").is_file():
        pytest.skip("needs gcc and Slurm's headers (Debian: libslurm-dev)")
    copy = tmp_path / "spank"
    copy.mkdir()
    for name in ("hetsched_spank.c", "Makefile"):
        shutil.copy(ROOT / "spank" / name, copy / name)
    done = subprocess.run(
        ["make", "-C", str(copy)], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "-Wall -Wextra -Werror" in done.stdout and "-shared -fPIC" in done.stdout
    assert "warning" not in (done.stdout + done.stderr).lower()
    assert (copy / "hetsched_spank.so").is_file()
    subprocess.run(["make", "-C", str(copy), "clean"], capture_output=True, check=True)
    assert not (copy / "hetsched_spank.so").exists()


def test_sbatch_help_lists_the_options(sbatch_help: str) -> None:
    for option in ("--hetsched-signal=SIG", "--hetsched-state-dir=DIR", "--hetsched-lease"):
        assert option in sbatch_help


def test_job_gets_the_variables_and_its_state_folder(submit: Submitter, root: Path) -> None:
    job_id, env = run_and_read(
        submit, JobOptions(extra=spank_options(root, signal="USR1", lease="30"))
    )
    folder = state_dir(root, env["uid"], job_id)
    assert env["HETSCHED_SIGNAL"] == "USR1"
    assert env["HETSCHED_STATE_ROOT"] == str(root)
    assert env["HETSCHED_STATE_DIR"] == str(folder)
    assert env["HETSCHED_LEASE_TIMEOUT_S"] == "30"
    assert env["step_dir"] == str(folder)  # job steps get them too
    for path in (folder.parent, folder):
        assert owner_and_mode(path) == (int(env["uid"]), 0o700)
    assert env["folder"] == f"700 {env['uid']}"


def test_options_reach_a_job_that_exports_only_named_variables(
    submit: Submitter, root: Path
) -> None:
    # --export=VAR,... (what a re-submission as another user uses) drops the variable that
    # carries options to slurmstepd; the plugin reads Slurm's own copy of them instead.
    _, env = run_and_read(
        submit,
        JobOptions(
            export={"PATH": "/usr/bin:/bin", "HETSCHED_JOB_KEY": "only"},
            export_all=False,
            extra=spank_options(root, signal="USR1"),
        ),
    )
    assert (env["HETSCHED_SIGNAL"], env["HETSCHED_STATE_DIR"]) == (
        "USR1",
        str(state_dir(root, env["uid"], "only")),
    )


def test_signal_spellings_are_canonical(submit: Submitter, root: Path) -> None:
    _, env = run_and_read(submit, JobOptions(extra=spank_options(root, signal="sigusr2")))
    assert env["HETSCHED_SIGNAL"] == "USR2"
    _, env = run_and_read(submit, JobOptions(extra=spank_options(root, signal="10")))
    assert env["HETSCHED_SIGNAL"] == "USR1"


def test_job_key_from_the_job_environment_names_the_folder(submit: Submitter, root: Path) -> None:
    _, env = run_and_read(
        submit, JobOptions(export={"HETSCHED_JOB_KEY": "abc"}, extra=spank_options(root))
    )
    folder = state_dir(root, env["uid"], "abc")
    assert env["HETSCHED_STATE_DIR"] == str(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    # The job prolog cannot see --export's variables and made <root>/<uid>/<job id>; the job
    # step, which knows the key, removes that empty folder again.
    assert sorted(p.name for p in folder.parent.iterdir()) == ["abc"]
    assert [p.name for p in root.iterdir()] == [env["uid"]]


def test_job_key_from_the_submitting_environment_reaches_the_prolog(
    submit: Submitter, root: Path, slurm_conf: str
) -> None:
    cli = SlurmCli(slurm_conf=slurm_conf, timeout_s=30, extra_env={"HETSCHED_JOB_KEY": "k-7"})
    job_id = CliSlurmBackend(cli).submit(
        ENV_SCRIPT,
        [JobOptions(output=str(submit.folder / "slurm-%j.out"), extra=spank_options(root))],
    )
    submit.job_ids.append(job_id)
    env = parse_env(read_when(submit.folder / f"slurm-{job_id}.out", "done", timeout_s=30))
    folder = state_dir(root, env["uid"], "k-7")
    assert env["HETSCHED_STATE_DIR"] == str(folder)
    # Made by the job prolog (slurmd, before the batch step), not by the job step.
    assert_made_by_the_prolog(slurm_conf, f"created state folder {folder} ")
    assert sorted(p.name for p in folder.parent.iterdir()) == ["k-7"]


def test_a_job_key_has_at_most_64_characters(
    submit: Submitter, root: Path, slurm_conf: str
) -> None:
    longest, too_long = "k" * 64, "k" * 65
    jobs = {
        key: submit(
            ENV_SCRIPT, JobOptions(export={"HETSCHED_JOB_KEY": key}, extra=spank_options(root))
        )
        for key in (longest, too_long)
    }
    env = {
        key: parse_env(read_when(submit.folder / f"slurm-{job_id}.out", "done", timeout_s=30))
        for key, job_id in jobs.items()
    }
    assert env[longest]["HETSCHED_STATE_DIR"] == str(state_dir(root, env[longest]["uid"], longest))
    assert env[too_long]["HETSCHED_STATE_DIR"] == "<unset>"
    _slurmd_log_lines(
        slurm_conf, f"HETSCHED_JOB_KEY '{longest}...' is not a valid job key (1 to 64"
    )


def assert_made_by_the_prolog(slurm_conf: str, needle: str) -> None:
    """The slurmd logs have `needle` from the job prolog: not from a job step ([<id>.batch])."""
    log = _slurmd_log_lines(slurm_conf, needle)
    assert log and all(".batch]" not in line for line in log), log


def _slurmd_log_lines(slurm_conf: str, needle: str) -> list[str]:
    template = next(
        line.split("=", 1)[1].strip()
        for line in Path(slurm_conf).read_text().splitlines()
        if line.startswith("SlurmdLogFile=")
    )
    logs = {Path(template.replace("%n", node)) for node in ("n1", "n2", "n3")}

    def probe() -> list[str]:
        return [
            line
            for log in logs
            if log.is_file()
            for line in log.read_text(errors="replace").splitlines()
            if needle in line
        ]

    return wait_for(probe, f"{needle!r} in the slurmd logs", timeout_s=10)


HET_SCRIPT = """#!/bin/bash
echo "batch=$HETSCHED_STATE_DIR"
srun --het-group=0,1 bash -c 'echo "step_$SLURMD_NODENAME=$HETSCHED_STATE_DIR"'
echo "done"
"""


def test_a_heterogeneous_job_uses_its_leaders_id(submit: Submitter, root: Path) -> None:
    job_id = submit(
        HET_SCRIPT,
        JobOptions(gpus=GpuRequest(1), constraint="v100", extra=spank_options(root)),
        JobOptions(gpus=GpuRequest(1), constraint="k80"),
    )
    text = read_when(submit.folder / f"slurm-{job_id}.out", "done", timeout_s=30)
    env = parse_env(text)
    leader = state_dir(root, os.getuid(), job_id)  # our jobs run as we do
    assert (env["batch"], env["step_n1"], env["step_n3"]) == (str(leader),) * 3
    # No folder for the second component's own id: every part uses the leader's.
    assert [p.name for p in leader.parent.iterdir()] == [job_id]


def test_the_prolog_makes_the_users_folder_and_the_jobs_folder(
    submit: Submitter, shared: Path, slurm_conf: str
) -> None:
    user = ensure_user(ALICE)
    root = shared / "state"
    job_id, env = submit_as(submit, user, shared / "out", JobOptions(extra=spank_options(root)))
    folder = state_dir(root, user.pw_uid, job_id)
    assert env["HETSCHED_STATE_DIR"] == str(folder)
    # <root>/<uid> is made by root (the prolog) and handed to the user; the job's folder in
    # it is made as the user. Both before the job starts, and only the user may enter them.
    for path in (folder.parent, folder):
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (user.pw_uid, user.pw_gid), path
        assert stat.S_IMODE(info.st_mode) == 0o700, path
    assert_made_by_the_prolog(slurm_conf, f"created {folder.parent} for uid {user.pw_uid} ")
    assert_made_by_the_prolog(slurm_conf, f"created state folder {folder} ")
    assert owner_and_mode(root) == (0, 0o711)  # the root itself is never changed


def test_a_users_folder_that_root_made_is_handed_to_the_user(
    submit: Submitter, shared: Path
) -> None:
    # Only root can make entries in the root: a folder of root's there is the controller's,
    # the admin's, or one the prolog of another job of the user is still handing over.
    user = ensure_user(ALICE)
    mine = shared / "state" / str(user.pw_uid)
    mine.mkdir(mode=0o755)
    job_id, env = submit_as(
        submit, user, shared / "out", JobOptions(extra=spank_options(shared / "state"))
    )
    assert env["HETSCHED_STATE_DIR"] == str(mine / job_id)
    assert owner_and_mode(mine) == (user.pw_uid, 0o700)
    assert owner_and_mode(mine / job_id) == (user.pw_uid, 0o700)


@pytest.mark.parametrize("trap", ["folder of another user", "link"])
def test_a_users_folder_someone_else_planted_is_not_used(
    submit: Submitter, shared: Path, slurm_conf: str, trap: str
) -> None:
    # From before the root was locked down: Bob made Alice's <root>/<uid> (Bob's, writable
    # by all) or a link there to a folder of his, to read or plant her checkpoints.
    alice, bob = ensure_user(ALICE), ensure_user(BOB)
    planted = shared / "state" / str(alice.pw_uid)
    bobs = shared / "bobs"
    if trap == "link":
        planted.symlink_to(bobs)
        message = f"{planted} is a symbolic link; not following it"
    else:
        bobs = planted
        message = (
            f"{planted} belongs to uid {bob.pw_uid}, not to the job's user {alice.pw_uid}; "
            "not using it"
        )
    bobs.mkdir()
    os.chown(bobs, bob.pw_uid, bob.pw_gid)
    bobs.chmod(0o777)
    job_id, env = submit_as(
        submit, alice, shared / "out", JobOptions(extra=spank_options(shared / "state"))
    )
    # Fail soft: the job runs, without a state folder, and says why in its output.
    assert (env["HETSCHED_STATE_DIR"], env["step_dir"]) == ("<unset>", "")
    assert f"hetsched: {message}; not setting HETSCHED_STATE_DIR" in read_when(
        shared / "out" / f"slurm-{job_id}.out", "done"
    )
    assert_made_by_the_prolog(slurm_conf, f"hetsched: {message}; not creating {planted / job_id}")
    assert submit.wait_state(job_id, "COMPLETED", timeout_s=30)
    assert list(bobs.iterdir()) == []  # nothing made in Bob's folder, nothing handed over
    assert owner_and_mode(bobs) == (bob.pw_uid, 0o777)
    assert planted.is_symlink() == (trap == "link")


@pytest.mark.parametrize("trap", ["mode 1733", "group-writable", "owned by a user", "link"])
def test_a_state_root_users_could_write_is_refused(
    submit: Submitter, root: Path, tmp_path: Path, trap: str
) -> None:
    given = root
    fix = f"chown root: {root}; chmod 0711 {root} (docs/security.md)"
    if trap == "mode 1733":  # what docs recommended before <root>/<uid>
        root.chmod(0o1733)
        message = f"state root {root} has mode 1733: other users could make a user's folder"
    elif trap == "group-writable":
        root.chmod(0o775)
        message = f"state root {root} has mode 0775: other users could make a user's folder"
    elif trap == "owned by a user":
        bob = ensure_user(BOB)
        os.chown(root, bob.pw_uid, bob.pw_gid)
        message = f"state root {root} belongs to uid {bob.pw_uid}, not to root"
    else:
        given = tmp_path / "link"
        given.symlink_to(root)
        message = f"state root {given} is a symbolic link (give the real path)"
        fix = ""
    job_id, env = run_and_read(submit, JobOptions(extra=spank_options(given)))
    assert env["HETSCHED_STATE_ROOT"] == str(given)
    assert (env["HETSCHED_STATE_DIR"], env["step_dir"]) == ("<unset>", "")
    text = (submit.folder / f"slurm-{job_id}.out").read_text()
    assert f"hetsched: {message}" in text and fix in text, text
    assert submit.wait_state(job_id, "COMPLETED", timeout_s=30)
    assert list(root.iterdir()) == []  # nothing made in it


def test_a_folder_of_someone_else_is_left_alone(submit: Submitter, shared: Path) -> None:
    user = ensure_user(ALICE)
    mine = shared / "state" / str(user.pw_uid)
    mine.mkdir(mode=0o700)
    os.chown(mine, user.pw_uid, user.pw_gid)
    taken = mine / "taken"
    taken.mkdir()
    taken.chmod(0o755)  # root's
    job_id, env = submit_as(
        submit,
        user,
        shared / "out",
        JobOptions(export={"HETSCHED_JOB_KEY": "taken"}, extra=spank_options(shared / "state")),
    )
    assert env["HETSCHED_STATE_DIR"] == str(taken)
    info = taken.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o755)
    assert submit.wait_state(job_id, "COMPLETED", timeout_s=30)


def test_a_state_root_that_does_not_exist_does_not_stop_the_job(
    submit: Submitter, tmp_path: Path, sbatch_help: str
) -> None:
    missing = tmp_path / "missing"
    job_id, env = run_and_read(submit, JobOptions(extra=spank_options(missing)))
    # Exported all the same: nothing is wrong with it, and the wrapper reports what is missing.
    assert env["HETSCHED_STATE_DIR"] == str(state_dir(missing, env["uid"], job_id))
    assert not missing.exists()
    assert submit.wait_state(job_id, "COMPLETED", timeout_s=30)


def test_a_job_without_the_options_runs_untouched(submit: Submitter, sbatch_help: str) -> None:
    job_id, env = run_and_read(submit, JobOptions())
    for name in VARIABLES:
        assert env[name] == os.environ.get(name, "<unset>")
    assert submit.wait_state(job_id, "COMPLETED", timeout_s=30)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("signal", "NOPE", "hetsched: --hetsched-signal: unknown signal 'NOPE'"),
        ("signal", "KILL", "cannot be caught"),
        ("signal", "TERM", "SIGTERM ends a paused job"),
        ("signal", "65", "signal number '65' is not in 1-31"),
        ("signal", "40", "signal number '40' is not in 1-31"),
        ("state-dir", "relative/dir", "is not an absolute path"),
        ("state-dir", "/" + "x" * 2000, "state dir is too long"),
        ("lease", "10m", "lease '10m' is not a whole number of seconds"),
    ],
)
def test_a_malformed_value_fails_the_submission_clearly(
    submit: Submitter, sbatch_help: str, option: str, value: str, message: str
) -> None:
    with pytest.raises(SlurmCommandError) as err:
        submit(ENV_SCRIPT, JobOptions(extra=((f"hetsched-{option}", value),)))
    assert message in err.value.stderr
    assert f"Invalid --hetsched-{option} argument" in err.value.stderr
