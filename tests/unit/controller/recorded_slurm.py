"""A fake of Slurm's command line answering from tests/golden/slurm-22.05 (submitit's
MockedSubprocess is the model), for the real `CliSlurmBackend(cli=fake)`: the real argv building
and parsers run, only the process boundary is faked. Its job table holds copies of recorded
`squeue --json --states=all` records (running job A, held job C of the golden scenario), changed
as Slurm changes them, and squeue answers with the recorded envelope around it. Refusals and
unanswered calls replay the recorded stderr of errors.txt / unreachable.txt (with the job id
asked about) through `slurm_hetsched.slurm.cli.classify_failure`, as `SlurmCli` does. Every argv
goes to `calls`, in order; what has no recording goes to `surprises`.
"""

from __future__ import annotations

import copy
import json
import os
import pwd
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.errors import SlurmCommandError
from slurm_hetsched.slurm.cli import _reports_failure, classify_failure
from slurm_hetsched.slurm.parse import parse_jobs
from slurm_hetsched.slurm.records import SlurmJob

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "slurm-22.05"
SPEC = "hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1"
SCRIPT = "#!/bin/bash\n#SBATCH --hold\n#SBATCH --requeue\nexec python train.py\n"
# Not in the recordings (taken from Slurm's source: slurm_errno.c ESLURM_JOB_FINISHED, printed by
# scontrol as "<error> for job <id>"): what `scontrol update` of a finished job answers.
FINISHED_TEXT = "Job has already finished for job {}"
FINISHED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@dataclass(frozen=True, slots=True)
class Recorded:
    """One block of errors.txt / unreachable.txt: what a command printed and returned."""

    label: str
    argv: str
    rc: int
    stderr: str
    stdout: str

    def text(self, stream: str, job_id: str) -> str:
        """`stream` with the recorded job id replaced by `job_id`."""
        recorded = job_id_of(shlex.split(self.argv))
        text = self.stderr if stream == "stderr" else self.stdout
        return re.sub(rf"\b{recorded}\b", job_id, text) if recorded and job_id else text


def read_cases(path: Path) -> dict[str, Recorded]:
    """The blocks of a recording file by label (format: tests/golden/README.md)."""
    cases = {}
    for block in path.read_text().split("=== case: ")[1:]:
        label, _, rest = block.partition("\n")
        head, _, rest = rest.partition("--- stderr ---\n")
        stderr, _, rest = rest.partition("--- stdout ---\n")
        fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)
        stdout = rest.rpartition("=== end")[0]
        cases[label] = Recorded(label, fields["argv"], int(fields["rc"]), stderr, stdout)
    return cases


CASES = read_cases(GOLDEN / "errors.txt") | read_cases(GOLDEN / "unreachable.txt")
ENVELOPE = json.loads((GOLDEN / "squeue_all.json").read_text())
_LETTERS = dict(line.split("=") for line in (GOLDEN / "jobs.txt").read_text().split())
_BY_ID = {str(job["job_id"]): job for job in ENVELOPE["jobs"]}
RUNNING_TEMPLATE = _BY_ID[_LETTERS["A"]]  # typed-v100: RUNNING on n1
HELD_TEMPLATE = _BY_ID[_LETTERS["C"]]  # held-k80: PENDING, JobHeldUser, priority 0
# What `scontrol` answers for a job that is not pending (hold, release, update of Features...).
NOT_PENDING = "update-features-running"
# The recorded answer of each command when slurmctld cannot be reached (scancel: both ways).
UNREACHABLE = {v: f"{v}-unreachable" for v in ("requeuehold", "release", "hold", "update")}
UNREACHABLE |= {"squeue": "squeue-json-unreachable", "sinfo": "sinfo-json-unreachable"}
UNREACHABLE |= {"signal": "signal-unreachable", "cancel": "signal-unreachable"}
# scontrol update Key -> the squeue --json field it sets; sbatch --option -> the same.
UPDATES = {"Features": "features", "TresPerNode": "tres_per_node", "Comment": "comment"}
UPDATES |= {"ReqNodeList": "required_nodes", "ExcNodeList": "excluded_nodes"}
UPDATES |= {"AdminComment": "admin_comment"}
UNKNOWN = {"scancel": "scancel-unknown-job", "scontrol": "update-unknown-job"}
SBATCH = {"constraint": "features", "nodelist": "required_nodes", "comment": "comment"}


def verb_of(argv: Sequence[str]) -> str:
    """squeue, sinfo, sbatch, signal, cancel, or the scontrol verb (requeuehold, update...)."""
    if argv[0] == "scancel":
        return "signal" if any(a.startswith("--signal=") for a in argv) else "cancel"
    return argv[1] if argv[0] == "scontrol" else argv[0]


def job_id_of(argv: Sequence[str]) -> str:
    """The job a command is about: its last argument that is a job id (or JobId=<id>)."""
    return next((a for a in (x.removeprefix("JobId=") for x in reversed(argv)) if a.isdigit()), "")


class RecordedSlurm:
    """Duck-typed `SlurmCli`: `run(argv, *, input_text=None, retry=True) -> str`.

    Knobs for tests: `refusals[(verb, job_id)] = label` replays a recorded refusal; `unreachable`
    (all calls), `unreachable_from = verb` (from the first call of that verb on) and
    `silent[verb] = n` (its next n calls) replay unreachable.txt; `requeue_polls` makes a
    requeue-held job show COMPLETING for that many squeue answers; `hooks[verb]` run after
    Slurm took a command (`hooks["signal"]` plays the wrapper: it writes the ack).
    """

    def __init__(self, clock: Callable[[], float] = lambda: 0.0) -> None:
        self.clock = clock
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: list[list[str]] = []
        # Each sbatch: its argv, the variables added to its environment, whether it inherits ours.
        self.submissions: list[tuple[list[str], dict[str, str], bool]] = []
        self.times: list[float] = []  # the clock at each call
        self.signals: list[tuple[str, str]] = []  # (job id, signal)
        self.unanswered: list[list[str]] = []
        self.surprises: list[str] = []
        self.hooks: dict[str, Callable[[str], None]] = {}
        self.log: list[str] | None = None  # shared with a journal, for one timeline
        self.refusals: dict[tuple[str, str], str] = {}
        self.unreachable = False
        self.unreachable_from: str | None = None
        self.requeue_polls = 0
        self.silent: dict[str, int] = {}
        self._settling: dict[str, int] = {}
        self._next_id = 200

    # -- the job table -------------------------------------------------------------------------

    def add_running(
        self, job_id: str, node: str, gpu_type: str, gpus: int = 1, **fields: Any
    ) -> None:
        """A running job the controller placed: the type as feature, an untyped count."""
        raw = self._new(RUNNING_TEMPLATE, job_id)
        raw.update(nodes=node, batch_host=node, features=gpu_type)
        raw.update(tres_per_node=f"gres:gpu:{gpus}", gres_detail=[f"gpu:{gpu_type}:{gpus}"])
        raw.update(fields)

    def add_pending(self, job_id: str, *, held: bool = True, gpus: int = 1, **fields: Any) -> None:
        """A pending job: held as the sbatch template submits it, or released."""
        raw = self._new(HELD_TEMPLATE, job_id)
        raw.update(features="", required_nodes="", excluded_nodes="")
        raw.update(tres_per_node=f"gres:gpu:{gpus}")
        if not held:
            raw.update(state_reason="None", priority=RUNNING_TEMPLATE["priority"])
        raw.update(fields)

    def _new(self, template: dict[str, Any], job_id: str) -> dict[str, Any]:
        """A copy of a recorded record as this test user's job `job_id`, with a spec."""
        raw = copy.deepcopy(template)
        raw.update(job_id=int(job_id), name=f"job{job_id}", user_id=os.getuid())
        raw.update(user_name=pwd.getpwuid(os.getuid()).pw_name, group_id=os.getgid())
        raw.update(comment=SPEC, admin_comment="", restart_cnt=0)
        self.jobs[job_id] = raw
        return raw

    def finish(self, job_id: str, state: str = "COMPLETED") -> None:
        """The job ended (its record stays until MinJobAge, as the recorded job E)."""
        self.jobs[job_id]["job_state"] = state

    def start(self, job_id: str, node: str) -> None:
        """Slurm started a pending job on `node`."""
        self.jobs[job_id].update(job_state="RUNNING", state_reason="None", batch_host=node)

    def record(self, job_id: str) -> SlurmJob:
        """The job as the real parser reads it from this table."""
        return next(j for j in parse_jobs(self._table()) if j.job_id == job_id)

    def sent(self, *prefix: str) -> list[list[str]]:
        """The calls whose argv starts with `prefix`."""
        return [c for c in self.calls if c[: len(prefix)] == list(prefix)]

    # -- SlurmCli ------------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        input_text: str | None = None,
        retry: bool = True,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
    ) -> str:
        argv = list(argv)
        if argv and argv[0] == "sbatch":
            self.submissions.append((argv, dict(env or {}), inherit_env))
        verb, job_id = verb_of(argv), job_id_of(argv)
        self.calls.append(argv)
        self.times.append(self.clock())
        if self.log is not None:
            self.log.append("$ " + " ".join(argv))
        if verb == self.unreachable_from:
            self.unreachable, self.unreachable_from = True, None
        if self.silent.get(verb, 0) > 0 or self.unreachable:
            self.silent[verb] = max(0, self.silent.get(verb, 0) - 1)
            self.unanswered.append(argv)
            if verb not in UNREACHABLE:
                return self._unrecorded(argv, f"{verb} while slurmctld is unreachable")
            return self.replay(argv, UNREACHABLE[verb], job_id)
        if (verb, job_id) in self.refusals:
            return self.replay(argv, self.refusals[(verb, job_id)], job_id)
        handler = getattr(self, f"_{verb}", None)
        if handler is None:
            return self._unrecorded(argv, verb)
        if job_id and job_id not in self.jobs:  # scancel is silent, scontrol says so
            return self.replay(argv, UNKNOWN[argv[0]], job_id)
        stdout: str = handler(argv, job_id, input_text)
        if verb in self.hooks:
            self.hooks[verb](job_id)
        return stdout

    def replay(self, argv: list[str], label: str, job_id: str) -> str:
        """Answer as the recorded case did, raising the error `SlurmCli._run_once` raises."""
        case = CASES[label]
        stderr, stdout = case.text("stderr", job_id), case.text("stdout", job_id)
        if case.rc != 0 or _reports_failure(argv, stderr):
            raise classify_failure(argv, case.rc, stderr or stdout)
        return stdout

    def _unrecorded(self, argv: list[str], what: str) -> str:
        self.surprises.append(f"{what}: {' '.join(argv)}")
        raise SlurmCommandError(argv, 1, f"the fake has no recording for {what}")

    def _table(self) -> str:
        settling = {"job_state": "COMPLETING", "state_reason": "None"}  # requeued, not yet pending
        jobs = [raw | settling if self._settling.get(i) else raw for i, raw in self.jobs.items()]
        return json.dumps(ENVELOPE | {"jobs": jobs}, indent=2)

    # -- the commands (empty stdout on success, as Slurm) --------------------------------------

    def _squeue(self, argv: list[str], job_id: str, _: str | None) -> str:
        table = self._table()
        self._settling = {k: n - 1 for k, n in self._settling.items() if n > 1}
        return table

    def _signal(self, argv: list[str], job_id: str, _: str | None) -> str:
        if self.jobs[job_id]["job_state"] != "RUNNING":
            return self._unrecorded(argv, "a signal to a job that does not run")
        self.signals.append((job_id, argv[-2].removeprefix("--signal=")))
        return ""

    def _requeuehold(self, argv: list[str], job_id: str, _: str | None) -> str:
        raw = self.jobs[job_id]
        if raw["job_state"] == "PENDING":
            return self.replay(argv, "requeue-pending-job", job_id)
        # Slurm requeues finished batch jobs too; it holds as for a user hold (job_mgr.c).
        raw.update(job_state="PENDING", state_reason="JobHeldUser", priority=0)
        raw.update(state_description="job requeued in held state", nodes="", batch_host="")
        raw.update(restart_cnt=raw["restart_cnt"] + 1, gres_detail=[])
        raw.pop("job_resources", None)
        if self.requeue_polls:
            self._settling[job_id] = self.requeue_polls
        return ""

    def _hold(self, argv: list[str], job_id: str, _: str | None) -> str:
        raw = self.jobs[job_id]
        if raw["job_state"] != "PENDING":
            return self.replay(argv, NOT_PENDING, job_id)
        raw.update(state_reason="JobHeldAdmin", priority=0)  # held by root
        return ""

    def _release(self, argv: list[str], job_id: str, _: str | None) -> str:
        raw = self.jobs[job_id]
        if raw["job_state"] != "PENDING":
            return self.replay(argv, NOT_PENDING, job_id)
        raw.update(state_reason="None", state_description="", priority=RUNNING_TEMPLATE["priority"])
        return ""

    def _update(self, argv: list[str], job_id: str, _: str | None) -> str:
        raw = self.jobs[job_id]
        pairs = dict(a.split("=", 1) for a in argv[3:])
        if raw["job_state"] in FINISHED:
            raise classify_failure(argv, 1, FINISHED_TEXT.format(job_id))
        pending_only = {"Features", "TresPerNode", "ReqNodeList", "StartTime"}
        if raw["job_state"] != "PENDING" and pending_only & set(pairs):
            return self.replay(argv, NOT_PENDING, job_id)
        for key, value in pairs.items():
            if key == "StartTime" and value == "now":
                raw["start_time"] = int(self.clock())
            elif key in UPDATES:
                raw[UPDATES[key]] = value
            else:
                return self._unrecorded(argv, f"scontrol update {key}=")
        return ""

    def _write(self, argv: list[str], job_id: str, _: str | None) -> str:
        return SCRIPT

    def _sbatch(self, argv: list[str], job_id: str, script: str | None) -> str:
        """One held pending record per component (a heterogeneous job for several)."""
        groups: list[list[str]] = [[]]
        for arg in argv[2:]:
            groups.append([]) if arg == ":" else groups[-1].append(arg)
        new_id = self._next_id
        self._next_id += len(groups)
        held = "--hold" in argv or "#SBATCH --hold" in (script or "")
        for offset, group in enumerate(groups):
            options = dict(a[2:].split("=", 1) for a in group if a.startswith("--") and "=" in a)
            fields: dict[str, Any] = {SBATCH[k]: v for k, v in options.items() if k in SBATCH}
            fields |= {"het_job_id": new_id if len(groups) > 1 else 0, "het_job_offset": offset}
            gpus = int(options.get("gres", "gpu:1").rsplit(":", 1)[-1])
            self.add_pending(str(new_id + offset), held=held, gpus=gpus, **fields)
        return f"{new_id}\n"

    def _cancel(self, argv: list[str], job_id: str, _: str | None) -> str:
        self.jobs[job_id].update(job_state="CANCELLED")
        return ""
