"""How far our simulator's average JCT is from Gavel's own simulator, trace by trace. Prints a
table; asserts nothing. Not part of CI: it needs a checkout of Gavel's code outside this
project, set up as docs/simulation.md ("Checking against Gavel's simulator") describes.

    .venv/bin/python benchmarks/gavel_fidelity.py --gavel ~/gavel/scheduler \\
        --gavel-python ~/gavel-venv/bin/python --generate s_light:100:3600:21 \\
        --generate m_heavy:150:900:24:multi --traces-dir /tmp/fidelity

    .venv/bin/python benchmarks/gavel_fidelity.py --gavel ~/gavel/scheduler \\
        --gavel-python ~/gavel-venv/bin/python a.trace b.trace --clusters 4:4:4,8:8:8

For each trace, V100:P100:K80 cluster and policy it runs Gavel's
`scripts/drivers/simulate_scheduler_with_trace.py` (360 s rounds, ECOS) and our
`hetsched simulate` on the same trace, GPU counts and seed, then compares the average JCT over
the jobs both completed (Gavel drops a multi-GPU job after 5 rounds with fewer steps left than
GPUs; the completed counts are printed). The heterogeneity-agnostic policies (max_min_fairness,
fifo) draw random type orders, so for them each simulator's average is the mean over
`--seeds` seeds (0, 1, ...; default 5); the others run with seed 0.

Ours runs in the Gavel-faithful mode (`--gavel-faithful`, with `--faithful-solver`, default
auto: ECOS where installed) unless `--mode ours`, which runs our own simulation with its
defaults. `--generate NAME:JOBS:LAM:SEED[:multi]` makes a trace with Gavel's own generator
first (LAM: mean seconds between arrivals). `--ours-option` passes one more option to our
simulator (repeatable), e.g. `--mode ours --ours-option=--moves=plain`.

Each Gavel run takes 1-15 s on one core; both simulators are deterministic for a seed.
`--jobs N` runs N comparisons at once (default 2); `--cache DIR` keeps Gavel's results, so a
second run (another mode or solver of ours) runs only our side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from slurm_hetsched.sim.faithful.forms import FAITHFUL_POLICIES as POLICIES

AGNOSTIC = ("max_min_fairness", "fifo")
TYPES = ("v100", "p100", "k80")  # the order of Gavel's -c V100:P100:K80
_JOB_LINE = re.compile(r"^Job (\d+): ([0-9.]+)$", re.MULTILINE)
# Gavel's scripts read their BLAS thread counts from here; one thread keeps runs comparable.
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Row:
    trace: str
    cluster: str
    policy: str
    ours_done: int
    gavel_done: int
    both: int
    ours_s: float
    gavel_s: float

    @property
    def deviation(self) -> float:
        return (self.ours_s - self.gavel_s) / self.gavel_s


def gavel_jcts(
    gavel: Path,
    python: str,
    trace: Path,
    policy: str,
    cluster: str,
    seed: int = 0,
    cache: Path | None = None,
) -> dict[str, float]:
    """Job id (trace line, from 0) -> JCT in seconds, of the jobs Gavel's simulator completed
    (kept in `cache`, by the trace's content, policy, cluster and seed: Gavel's runs are
    deterministic)."""
    if cache is not None:
        digest = hashlib.sha256(trace.read_bytes()).hexdigest()[:16]
        saved = cache / f"{digest}-{policy}-{cluster.replace(':', '_')}-{seed}.json"
        if saved.is_file():
            return {k: float(v) for k, v in json.loads(saved.read_text()).items()}
        jcts = gavel_jcts(gavel, python, trace, policy, cluster, seed)
        saved.write_text(json.dumps(jcts))
        return jcts
    argv = [python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t", str(trace)]
    argv += ["-p", policy, "-c", cluster, "--seed", str(seed), "--solver", "ECOS"]
    done = subprocess.run(
        argv, cwd=gavel, env={**os.environ, **_ONE_THREAD}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"Gavel's simulator failed on {trace} ({policy}):\n{done.stderr[-2000:]}")
    return {m.group(1): float(m.group(2)) for m in _JOB_LINE.finditer(done.stdout)}


def our_jcts(
    trace: Path, policy: str, cluster: str, options: list[str], seed: int = 0
) -> dict[str, float]:
    """Job id -> JCT of the jobs our simulator completed, with Gavel's GPU counts."""
    counts = ",".join(f"{t}={n}" for t, n in zip(TYPES, cluster.split(":"), strict=True))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        argv = [sys.executable, "-m", "slurm_hetsched.cli", "simulate", "--trace", str(trace)]
        argv += ["--policy", policy, "--cluster", counts, "--seed", str(seed), "--no-progress"]
        argv += ["--json", str(out), *options]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"our simulator failed on {trace} ({policy}):\n{done.stderr[-2000:]}")
        result = json.loads(out.read_text())
    return {job["job_id"]: job["jct_s"] for job in result["jobs"] if job["jct_s"] is not None}


def compare(trace: Path, cluster: str, policy: str, args: argparse.Namespace) -> Row:
    """One cell: each simulator's average JCT over the jobs both completed, averaged over the
    seeds for the agnostic policies (completed counts: of seed 0)."""
    seeds = range(args.seeds) if policy in AGNOSTIC else range(1)
    options = ["--gavel-faithful", "--faithful-solver", args.faithful_solver]
    options = [*(options if args.mode == "faithful" else []), *args.ours_option]
    ours_means, gavel_means, counts = [], [], None
    for seed in seeds:
        theirs = gavel_jcts(args.gavel, args.gavel_python, trace, policy, cluster, seed, args.cache)
        ours = our_jcts(trace, policy, cluster, options, seed)
        both = sorted(set(theirs) & set(ours))
        if not both:
            raise SystemExit(f"{trace.name} {policy} {cluster}: no job completed in both")
        ours_means.append(statistics.mean(ours[j] for j in both))
        gavel_means.append(statistics.mean(theirs[j] for j in both))
        counts = counts or (len(ours), len(theirs), len(both))
    assert counts is not None
    label = f"{policy} ({len(seeds)} seeds)" if len(seeds) > 1 else policy
    return Row(
        trace.name,
        cluster,
        label,
        *counts,
        statistics.mean(ours_means),
        statistics.mean(gavel_means),
    )


def generate(spec: str, args: argparse.Namespace) -> Path:
    """A trace from Gavel's generator: NAME:JOBS:LAM:SEED[:multi]."""
    parts = spec.split(":")
    if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "multi"):
        raise SystemExit(
            f"--generate {spec!r}: expected NAME:JOBS:LAM:SEED or NAME:JOBS:LAM:SEED:multi"
        )
    name, jobs, lam, seed = parts[:4]
    target: Path = args.traces_dir / f"{name}.trace"
    argv = [args.gavel_python, "scripts/utils/generate_trace.py", "--num_jobs", jobs]
    argv += ["--lam", lam, "--seed", seed, "--throughputs_file", "simulation_throughputs.json"]
    argv += [*(["-m"] if len(parts) == 5 else []), "--output_file", str(target.resolve())]
    done = subprocess.run(
        argv, cwd=args.gavel, env={**os.environ, **_ONE_THREAD}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"Gavel's generator failed for {spec}:\n{done.stderr[-2000:]}")
    return target


def print_table(rows: list[Row]) -> None:
    print(f"{'trace':<16} {'cluster':<8} {'policy':<38} {'done ours/gavel/both':>21} "
          f"{'ours s':>10} {'gavel s':>10} {'dev':>7}")  # fmt: skip
    for r in rows:
        done = f"{r.ours_done}/{r.gavel_done}/{r.both}"
        print(f"{r.trace:<16} {r.cluster:<8} {r.policy:<38} {done:>21} {r.ours_s:10.0f} "
              f"{r.gavel_s:10.0f} {100 * r.deviation:+6.1f}%")  # fmt: skip
    deviations = [abs(r.deviation) for r in rows]
    within = sum(d <= 0.03 for d in deviations)
    print(f"\n{len(rows)} runs: mean |deviation| {100 * statistics.mean(deviations):.1f}%, "
          f"largest {100 * max(deviations):.1f}%, {within} within 3%")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=Path, help="Gavel-format .trace files")
    parser.add_argument("--gavel", type=Path, required=True, help="Gavel's scheduler/ folder")
    parser.add_argument("--gavel-python", default="python3", help="the Python of Gavel's venv")
    parser.add_argument(
        "--generate", action="append", default=[], metavar="NAME:JOBS:LAM:SEED[:multi]"
    )
    parser.add_argument(
        "--traces-dir", type=Path, default=Path("."), help="where --generate writes"
    )
    parser.add_argument("--clusters", default="4:4:4", help="V100:P100:K80 counts, comma-separated")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--mode", choices=("faithful", "ours"), default="faithful")
    parser.add_argument("--faithful-solver", choices=("auto", "ECOS", "CLARABEL"), default="auto")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the agnostic policies")
    parser.add_argument("--jobs", type=int, default=2, help="comparisons run at once")
    parser.add_argument("--cache", type=Path, help="keep Gavel's results in this folder")
    parser.add_argument("--ours-option", action="append", default=[], help="an option of ours")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        parser.error("--seeds and --jobs: expected at least 1")
    if not (args.gavel / "scripts/drivers/simulate_scheduler_with_trace.py").is_file():
        parser.error(f"--gavel {args.gavel}: not Gavel's scheduler/ folder (no scripts/drivers)")
    args.traces_dir.mkdir(parents=True, exist_ok=True)
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
    traces = [*args.traces, *(generate(spec, args) for spec in args.generate)]
    if not traces:
        parser.error("give trace files or --generate")
    cells = [
        (trace.resolve(), cluster, policy)
        for trace in traces
        for cluster in args.clusters.split(",")
        for policy in args.policies.split(",")
    ]

    def one(cell: tuple[Path, str, str]) -> Row:
        row = compare(*cell, args)
        print(f"  {row.trace} {row.cluster} {row.policy}: {100 * row.deviation:+.1f}%",
              file=sys.stderr, flush=True)  # fmt: skip
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, cells))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
