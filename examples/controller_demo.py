"""The whole product on the dev cluster: the same training jobs under Slurm alone, then under
hetsched's controller, side by side.

Run it with `make demo` (which brings the dev cluster up first), or by hand:
    hetsched devcluster up && eval "$(hetsched devcluster env)"
    python examples/controller_demo.py [--policy NAME] [--round S]

Eight real template jobs (sbatch_templates/train.sbatch running examples/train_mlp.py inside
the wrapper), one per job class, each asking for one untyped GPU. The wrapper's EMULATION knob
is on: a step on a slower GPU type lasts as much longer as Gavel measured for that class (a
ResNet-18 runs ~10x slower on a K80 than on a V100, an A3C ~2x, a Recommendation model is
fastest on a P100), so the CPU-only dev cluster behaves like a heterogeneous one.

1. Slurm alone: the jobs are released at once, in the order of their class names, and Slurm
   places them by its own rules.
2. hetsched: the same jobs are submitted held; `hetsched controller` (with
   etc/hetsched-devcluster.toml: the default policy, heterogeneity-aware max-min fairness,
   and amortized moves) runs short rounds and places and moves them by GPU type; `squeue`
   with the admin comments is shown after every round.
3. A summary: each job's completion time under both, the average, each move with what it
   cost (the job's restart, as the controller measured it) and what it gained (the time its
   steps on the new GPU type saved), the steps lost (must be 0) and whether every job ended
   with exactly the parameters of an uninterrupted run. The exit status is non-zero when a
   job failed, lost a step or differs.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetsched.controller.config import ControllerConfig, load_config
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, SlurmCli, SlurmJob
from slurm_hetsched.store.sqlite import SqliteStore
from slurm_hetsched.wrapper.template import render_template

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "sbatch_templates" / "train.sbatch"
TRAIN = REPO / "examples" / "train_mlp.py"
CONFIG = REPO / "etc" / "hetsched-devcluster.toml"

# (name, job class): one job per class, in the order Slurm alone receives them (by class name).
JOBS = [
    ("a3c", "A3C"),
    ("cyclegan", "CycleGAN"),
    ("lm", "LM (batch size 20)"),
    ("rec-2048", "Recommendation (batch size 2048)"),
    ("rec-512", "Recommendation (batch size 512)"),
    ("resnet18", "ResNet-18 (batch size 128)"),
    ("resnet50", "ResNet-50 (batch size 64)"),
    ("transformer", "Transformer (batch size 64)"),
]
STEP_TIME_S = 0.05  # a step on the job's fastest GPU type; slower types stretch it
STEPS = 240  # 12 s of training on the fastest type, up to ~2 min on the slowest
_STEP_LINE = re.compile(r"^step=(\d+) \S+ node=(\S+) restart=(\d+)$", re.MULTILINE)
_FINAL_LINE = re.compile(r"^final steps=(\d+) params_sha256=([0-9a-f]{64})$", re.MULTILINE)


@dataclass
class Outcome:
    """One job of one phase, once it ended."""

    job_id: str
    state: str
    jct_s: float
    gpu_types: list[str]  # the types it ran on, in order
    restarts: int
    steps_run: int  # step lines printed over all runs
    final_steps: int | None
    digest: str | None
    steps_by_run: dict[int, tuple[str, int]] = field(default_factory=dict)  # restart -> type, steps

    @property
    def steps_lost(self) -> int:
        """Steps trained twice because a restart went back behind them."""
        return max(0, self.steps_run - (self.final_steps or 0))


@dataclass
class Phase:
    name: str
    folder: Path
    state_root: Path
    submitted: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (id, at)
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    @property
    def job_ids(self) -> list[str]:
        return [job_id for job_id, _ in self.submitted.values()]


def job_environment(state_root: Path) -> dict[str, str]:
    """All a demo job gets: its Python, the state root, and the emulation knob on."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "SLURM_CONF": os.environ["SLURM_CONF"],
        "HETSCHED_PYTHON": sys.executable,
        "HETSCHED_STATE_ROOT": str(state_root),
        "HETSCHED_EMULATE_GPU_SPEED": "1",
        "HETSCHED_PROGRESS_EVERY_S": "1",
        "HETSCHED_LOG_LEVEL": "WARNING",
    }


def submit_all(backend: CliSlurmBackend, phase: Phase) -> None:
    """Submit every job through the template (held, as the template does)."""
    phase.folder.mkdir(parents=True)
    phase.state_root.mkdir(parents=True, exist_ok=True)
    for seed, (name, job_class) in enumerate(JOBS):
        script = render_template(
            TEMPLATE.read_text(),
            [
                str(TRAIN),
                "--steps",
                str(STEPS),
                "--seed",
                str(seed),
                "--step-time-s",
                str(STEP_TIME_S),
            ],
            comment=f"hetsched:class={job_class};steps={STEPS}",
        )
        options = JobOptions(
            job_name=name,
            gpus=GpuRequest(1),
            export=job_environment(phase.state_root),
            export_all=False,
            chdir=str(phase.folder),
        )
        at = time.time()
        phase.submitted[name] = (backend.submit(script, [options]), at)


def wait_until_done(
    backend: CliSlurmBackend,
    phase: Phase,
    timeout_s: float,
    every: Callable[[], None] | None = None,
) -> dict[str, SlurmJob]:
    """Poll until every job of the phase ended; returns their last records by id."""
    deadline = time.monotonic() + timeout_s
    wanted = set(phase.job_ids)
    while True:
        jobs = {j.job_id: j for j in backend.list_jobs() if j.job_id in wanted}
        if len(jobs) == len(wanted) and not any(j.state.is_active for j in jobs.values()):
            return jobs
        if time.monotonic() > deadline:
            raise TimeoutError(f"{phase.name}: jobs still running after {timeout_s:.0f} s")
        if every is not None:
            every()
        time.sleep(1.0)


def collect(phase: Phase, jobs: Mapping[str, SlurmJob], node_types: Mapping[str, str]) -> None:
    for name, (job_id, submitted_at) in phase.submitted.items():
        job = jobs[job_id]
        log = (phase.folder / f"train-{job_id}.out").read_text(errors="replace")
        steps = _STEP_LINE.findall(log)
        runs: list[tuple[int, str]] = []  # (restart, GPU type) of each run that trained
        steps_by_run: dict[int, tuple[str, int]] = {}
        for _, node, restart in steps:
            here = (int(restart), node_types.get(node, "?"))
            if not runs or runs[-1] != here:
                runs.append(here)
            _, count = steps_by_run.get(here[0], (here[1], 0))
            steps_by_run[here[0]] = (here[1], count + 1)
        final = _FINAL_LINE.search(log)
        end = job.end_time if job.end_time is not None else time.time()
        phase.outcomes[name] = Outcome(
            job_id=job_id,
            state=job.state.value,
            jct_s=end - submitted_at,
            gpu_types=[gpu_type for _, gpu_type in runs],
            restarts=job.restart_count,
            steps_run=len(steps),
            final_steps=int(final.group(1)) if final else None,
            digest=final.group(2) if final else None,
            steps_by_run=steps_by_run,
        )


def reference_digests(folder: Path) -> dict[str, subprocess.Popen[str]]:
    """Start one uninterrupted local run per job (no Slurm, no padding) to compare against."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "HETSCHED"))}
    runs = {}
    for seed, (name, _) in enumerate(JOBS):
        env["HETSCHED_STATE_DIR"] = str(folder / name)
        runs[name] = subprocess.Popen(
            [sys.executable, str(TRAIN), "--steps", str(STEPS), "--seed", str(seed)],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    return runs


def show_squeue(job_ids: Sequence[str]) -> str:
    """What any user sees: squeue with the controller's admin comments."""
    done = subprocess.run(
        [
            "squeue",
            "--jobs=" + ",".join(job_ids),
            "-O",
            "JobID:7,Name:12,State:11,NodeList:6,admin_comment:80",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.rstrip() or done.stderr.rstrip()


def run_slurm_alone(backend: CliSlurmBackend, phase: Phase, timeout_s: float) -> None:
    print(f"\n== 1. Slurm alone: {len(JOBS)} jobs released at once, placed by Slurm ==")
    submit_all(backend, phase)
    for job_id in phase.job_ids:
        backend.release(job_id)  # what a cluster without hetsched does: no hold
    time.sleep(3)
    print(show_squeue(phase.job_ids))
    print("(waiting for them to finish; the slowest runs ~10x behind its best GPU type)")
    jobs = wait_until_done(backend, phase, timeout_s)
    collect(phase, jobs, node_type_map(backend))


def run_with_hetsched(
    backend: CliSlurmBackend,
    phase: Phase,
    config: ControllerConfig,
    args: argparse.Namespace,
) -> tuple[int, int]:
    """The jobs under the controller; returns (first round, last round) it ran."""
    print(
        f"\n== 2. hetsched: the same jobs, held for the controller (policy "
        f"{args.policy or config.policy}, {config.moves} moves, {args.round:g} s rounds) =="
    )
    first = _last_round(config)
    submit_all(backend, phase)
    log_path = phase.folder / "controller.log"
    argv = [sys.executable, "-m", "slurm_hetsched.cli", "controller", "--config", str(CONFIG)]
    argv += ["--round", str(args.round)]
    if args.policy:
        argv += ["--policy", args.policy]
    with log_path.open("w") as log:
        controller = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    shown = {"round": first, "text": ""}

    def every() -> None:
        if controller.poll() is not None:
            raise HetschedError(
                f"the controller exited with {controller.returncode}: "
                + log_path.read_text()[-2000:]
            )
        current = _last_round(config)
        text = show_squeue(phase.job_ids)
        if current != shown["round"] and text != shown["text"]:
            print(f"\n-- after round {current} --\n{text}")
            shown.update(round=current, text=text)

    try:
        jobs = wait_until_done(backend, phase, args.timeout, every)
    finally:
        controller.send_signal(signal.SIGTERM)
        controller.wait(timeout=120)
    collect(phase, jobs, node_type_map(backend))
    return first + 1, _last_round(config)


def _last_round(config: ControllerConfig) -> int:
    if not config.store.exists():
        return 0
    store = SqliteStore(config.store)
    try:
        record = store.load()
        return record.round if record is not None else 0
    finally:
        store.close()


@dataclass
class Move:
    """One move the controller made, with what it cost and what it gained."""

    name: str
    round: int
    before: str  # GPU type
    after: str
    restart_s: float | None  # the controller's measured restart cost; None: not measured
    steps_after: int = 0  # steps the next run trained on the new type

    def gain_s(self) -> float:
        """Seconds the steps after the move saved against the old type (negative when the
        move went to a slower type, to give the faster one to others)."""
        return self.steps_after * (
            step_time_s(self.name, self.before) - step_time_s(self.name, self.after)
        )


def moves_made(config: ControllerConfig, rounds: tuple[int, int], phase: Phase) -> list[Move]:
    """The moves (checkpoint, requeue onto other GPUs) the controller made in those rounds, in
    order, from its journal: each with the restart cost it measured for the job (journaled
    with later rounds' snapshots) and the steps the job's next run trained."""
    names = {job_id: name for name, (job_id, _) in phase.submitted.items()}
    store = SqliteStore(config.store)
    try:
        records = [r for r in store.rounds() if rounds[0] <= r.round <= rounds[1]]
        done = {
            (a.round, a.job_key)
            for a in store.actions()
            if a.kind in ("requeue_hold", "submit") and a.status == "done"
        }
    finally:
        store.close()
    moves: list[Move] = []
    previous: dict[str, str] = {}
    for i, record in enumerate(records):
        for key, placement in sorted(record.plan.move.items()):
            if key not in names or (record.round, key) not in done:
                continue
            later = [
                job.restart_s
                for r in records[i + 1 :]
                for job in (r.snapshot.jobs if r.snapshot is not None else ())
                if job.key == key and job.restart_s is not None
            ]
            moves.append(
                Move(
                    names[key],
                    record.round,
                    previous.get(key, "?"),
                    placement.gpu_types[0],
                    later[0] if later else None,
                )
            )
        for key, placement in record.plan.placements.items():
            previous[key] = placement.gpu_types[0]
    # Each requeue (a move or a stop) starts the job's next run: the run after a move is the
    # one whose restart count is the number of requeues up to and including it.
    requeues: dict[str, list[int]] = {}
    for round_, key in sorted(done):
        if key in names:
            requeues.setdefault(names[key], []).append(round_)
    for move in moves:
        outcome = phase.outcomes.get(move.name)
        run = sum(1 for r in requeues.get(move.name, []) if r <= move.round)
        if outcome is not None:
            move.steps_after = outcome.steps_by_run.get(run, ("?", 0))[1]
    return moves


def node_type_map(backend: CliSlurmBackend) -> dict[str, str]:
    return {n.name: "+".join(sorted(n.gpus)) or "-" for n in backend.list_nodes()}


TYPES = ["v100", "p100", "k80"]


@functools.cache
def relative_speed(job_class: str) -> dict[str, float]:
    """Steps/s of `job_class` on each type relative to its fastest type (Gavel's table): the
    factor the wrapper's emulation stretches a step by."""
    row = dict(zip(TYPES, shipped_throughputs().row(job_class, 1, TYPES), strict=True))
    best = max(row.values())
    return {t: rate / best for t, rate in row.items()}


def step_time_s(name: str, gpu_type: str) -> float:
    """How long a step of job `name` lasts on `gpu_type` under emulation: STEP_TIME_S on its
    fastest type, stretched by Gavel's measured slowdown elsewhere."""
    speed = relative_speed(dict(JOBS)[name]).get(gpu_type)
    return STEP_TIME_S / speed if speed else float("nan")


def speed_ratios() -> dict[str, str]:
    """Per class, steps/s on v100 : p100 : k80 relative to its fastest type."""
    return {
        job_class: " ".join(f"{relative_speed(job_class)[t]:.2f}" for t in TYPES)
        for _, job_class in JOBS
    }


def summary(
    alone: Phase, managed: Phase, references: Mapping[str, str], moves: Sequence[Move]
) -> bool:
    ratios = speed_ratios()
    print("\n== 3. Summary ==")
    header = ("job", "speed v100 p100 k80", "Slurm alone", "GPU", "hetsched", "GPU types")
    rows = [header]
    ok = True
    problems = []
    for name, job_class in JOBS:
        a, m = alone.outcomes[name], managed.outcomes[name]
        rows.append(
            (
                name,
                ratios[job_class],
                f"{a.jct_s:6.1f} s",
                "->".join(a.gpu_types) or "-",
                f"{m.jct_s:6.1f} s",
                "->".join(m.gpu_types) or "-",
            )
        )
        for phase, outcome in ((alone.name, a), (managed.name, m)):
            if outcome.state != "COMPLETED" or outcome.final_steps != STEPS:
                problems.append(f"{phase} {name}: {outcome.state}, steps {outcome.final_steps}")
            elif outcome.digest != references.get(name):
                problems.append(f"{phase} {name}: parameters differ from an uninterrupted run")
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    avg_alone = sum(o.jct_s for o in alone.outcomes.values()) / len(JOBS)
    avg_managed = sum(o.jct_s for o in managed.outcomes.values()) / len(JOBS)
    lost = sum(o.steps_lost for o in managed.outcomes.values())
    print(
        f"\naverage completion time: Slurm alone {avg_alone:.1f} s, hetsched {avg_managed:.1f} s "
        f"({avg_alone / avg_managed:.2f}x faster)"
    )
    show_moves(moves)
    print(
        f"moves made: {len(moves)}; steps lost: {lost}; results identical to uninterrupted "
        f"runs: {'yes' if not problems else 'NO'}"
    )
    if lost:
        problems.append(f"{lost} steps were trained twice after a move")
    for problem in problems:
        ok = False
        print(f"PROBLEM: {problem}")
    return ok


def show_moves(moves: Sequence[Move]) -> None:
    """Each move: its restart (measured by the controller), the time its steps on the new type
    saved, and whether it paid for itself."""
    if not moves:
        print("\nno moves: every job stayed where it started")
        return
    print("\nmoves, what each cost (the job's restart) and gained (its steps on the new type):")
    for m in moves:
        cost = "not measured" if m.restart_s is None else f"{m.restart_s:.1f} s (measured)"
        gain = m.gain_s()
        verdict = (
            "gave its GPU type to others"
            if gain < 0
            else "paid for itself"
            if m.restart_s is not None and gain > m.restart_s
            else "did not pay"
            if m.restart_s is not None
            else "?"
        )
        print(
            f"  {m.name:12} round {m.round:3}  {m.before}->{m.after}: restart {cost}; "
            f"{m.steps_after} steps on {m.after} saved {gain:.1f} s -> {verdict}"
        )
    measured = [m for m in moves if m.restart_s is not None]
    print(
        f"in all: restarts cost {sum(m.restart_s or 0.0 for m in measured):.1f} s "
        f"({len(measured)} of {len(moves)} measured), the moved steps saved "
        f"{sum(max(0.0, m.gain_s()) for m in moves):.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--policy",
        help="the controller's policy (default: the config's, max_min_fairness_perf; "
        "`hetsched allocate --list`)",
    )
    parser.add_argument("--round", type=float, default=8.0, help="controller round, s (8)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per phase, s (600)")
    args = parser.parse_args(argv)
    if not os.environ.get("SLURM_CONF"):
        print('run: eval "$(hetsched devcluster env)" first (SLURM_CONF is not set)')
        return 2
    config = load_config(CONFIG)
    backend = CliSlurmBackend(SlurmCli())
    work = REPO / ".devcluster" / "demo" / time.strftime("%Y%m%d-%H%M%S")
    alone = Phase("Slurm alone", work / "slurm-alone", work / "slurm-alone" / "state")
    managed = Phase("hetsched", work / "hetsched", config.state_root)
    with tempfile.TemporaryDirectory(prefix="hetsched-demo-") as scratch:
        runs = reference_digests(Path(scratch))
        try:
            run_slurm_alone(backend, alone, args.timeout)
            rounds = run_with_hetsched(backend, managed, config, args)
        finally:
            left = [j for p in (alone, managed) for j in p.job_ids]
            for job in backend.list_jobs():
                if job.job_id in left and job.state.is_active:
                    backend.cancel(job.job_id)
        references = {}
        for name, run in runs.items():
            out, _ = run.communicate(timeout=300)
            found = _FINAL_LINE.search(out)
            references[name] = found.group(2) if found else ""
    ok = summary(alone, managed, references, moves_made(config, rounds, managed))
    print(f"\njob logs and the controller's log: {work}")
    print("rounds: hetsched rounds --config etc/hetsched-devcluster.toml --last 10")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
