"""HadarE against Hadar and Gavel on the paper's physical-cluster setting (Sultana et al.,
section VI): cluster utilisation, total time (makespan) and average JCT of the seven job mixes
at slots of 90, 180 and 360 s, and the mean ratios beside the paper's 1.56x (utilisation,
HadarE over Gavel), 2.12x (total time, Gavel over HadarE) and 1.79x (total time, Hadar over
HadarE). Prints tables; asserts nothing (tests/sim/test_hadare_*.py check the model).

    .venv/bin/python benchmarks/hadare.py                    # the table, about 10 s
    .venv/bin/python benchmarks/hadare.py --sensitivity      # + ratios against the two knobs
    .venv/bin/python benchmarks/hadare.py --overhead 20 --efficiency 0.8
    .venv/bin/python benchmarks/hadare.py --calibrate        # re-derive BASE_S (M-5 = 4200 s)

Scenario (sim/scenario_hadare.py, docs/simulation.md "HadarE"): 5 single-GPU nodes (1 v100,
2 k80, 2 t4 = 0.35 x v100), Table III's workloads as Gavel classes, lengths calibrated so that
M-5 under Gavel takes 4200 s. Schedulers: gavel = max-min fairness without forking, hadar =
our hadar, hadare = hadar with every job forked into up to 5 copies (one per node),
gavel_fork = max-min fairness over the copies, hadar_paper / hadare_paper = the same with the
paper's pricing (every type priced alike, no critical jobs first). Utilisation is busy
GPU-time (training, restarts and averaging overhead) over 5 GPUs x makespan; "useful" counts
training only. "bound" is the least makespan any forking scheduler could reach (an LP: no
rounds, restarts or overhead, averaged steps worth full steps), so gavel / bound caps the
Gavel/HadarE ratio this setting allows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor

from policies import print_header

MAIN = ("gavel", "hadar", "hadare")
EXTRA = ("gavel_fork", "hadar_paper", "hadare_paper")
PAPER = {"util": 1.56, "gavel_time": 2.12, "hadar_time": 1.79}
# (efficiency, overhead s) pairs of --sensitivity.
GRID = ((1.0, 0.0), (1.0, 8.0), (0.9, 0.0), (0.9, 8.0), (0.9, 30.0), (0.8, 8.0), (0.7, 8.0),
        (0.5, 8.0))  # fmt: skip

Case = tuple[str, float, str, float, float]  # mix, slot, scheduler, overhead, efficiency
Values = dict[str, float]
UNFORKED = ("gavel", "hadar", "hadar_paper")  # the forking knobs change nothing in these


def case(mix: str, slot: float, name: str, knobs: tuple[float, float]) -> Case:
    """The case of a run; one per mix and slot for the schedulers that do not fork."""
    return (mix, slot, name, *((0.0, 1.0) if name in UNFORKED else knobs))


def run(one: Case) -> tuple[Case, Values]:
    """One simulation (in a worker process)."""
    from slurm_hetsched.sim.scenario_hadare import run_case

    mix, slot, scheduler, overhead, efficiency = one
    out = run_case(mix, slot, scheduler, overhead_s=overhead, efficiency=efficiency)
    result, stats = out.result, out.stats
    busy = result.utilization * 5 * result.makespan_s
    restart = result.restart_gpu_h * 3600.0
    useful = (busy - restart - stats.overhead_gpu_s) / (5 * result.makespan_s)
    return one, {
        "util": result.utilization,
        "useful": useful,
        "time": result.makespan_s,
        "jct": result.avg_jct_s,
        "rounds": float(result.rounds),
        "averaged": float(stats.averaged_rounds),
        "not_started": float(stats.not_started),
    }


def run_all(cases: Sequence[Case], procs: int) -> dict[Case, Values]:
    with ProcessPoolExecutor(max_workers=max(1, procs)) as pool:
        return dict(pool.map(run, cases, chunksize=4))


def bounds(mixes: Sequence[str]) -> dict[str, float]:
    from slurm_hetsched.sim.scenario_hadare import (
        forking_bound_s,
        hadare_nodes,
        hadare_table,
        mix_trace,
    )

    table = hadare_table()
    return {m: forking_bound_s(mix_trace(m, table=table), hadare_nodes(), table) for m in mixes}


def ratios(
    got: Mapping[Case, Values],
    mix: str,
    slot: float,
    knobs: tuple[float, float],
    names: Sequence[str],
) -> dict[str, float]:
    """The paper's three ratios for one mix and slot; `names` = (gavel, hadar, hadare)."""
    g, h, e = (got[case(mix, slot, n, knobs)] for n in names)
    return {
        "util": e["util"] / g["util"],
        "gavel_time": g["time"] / e["time"],
        "hadar_time": h["time"] / e["time"],
        "hadar_util": e["util"] / h["util"],
        "gavel_jct": g["jct"] / e["jct"],
    }


def print_tables(
    got: Mapping[Case, Values],
    mixes: Sequence[str],
    slots: Sequence[float],
    names: Sequence[str],
    knobs: tuple[float, float],
) -> None:
    for slot in slots:
        print(f"\nSlot {slot:g} s: utilisation (useful) / total time s / average JCT s")
        cols = " ".join(f"{n:>26}" for n in names)
        print_header(f"{'mix':<5} {cols}")
        for mix in mixes:
            cells = []
            for n in names:
                v = got[case(mix, slot, n, knobs)]
                cells.append(
                    f"{v['util']:.2f} ({v['useful']:.2f}) {v['time']:6.0f} {v['jct']:6.0f}"
                )
            print(f"{mix:<5} " + " ".join(f"{c:>26}" for c in cells))


def print_ratios(
    got: Mapping[Case, Values],
    mixes: Sequence[str],
    slots: Sequence[float],
    names: Sequence[str],
    knobs: tuple[float, float],
    bound: Mapping[str, float],
    title: str,
) -> None:
    gavel, hadar, hadare = names
    print(f"\n{title}")
    head = (f"{'mix':<5} {'slot':>4} {hadare + '/' + gavel + ' util':>22} "
            f"{gavel + '/' + hadare + ' time':>22} {hadar + '/' + hadare + ' time':>24} "
            f"{hadare + '/' + hadar + ' util':>22} {gavel + '/' + hadare + ' JCT':>21} "
            f"{gavel + '/bound':>12}")  # fmt: skip
    print_header(head)
    every: list[dict[str, float]] = []
    caps: list[float] = []
    for slot in slots:
        for mix in mixes:
            r = ratios(got, mix, slot, knobs, names)
            every.append(r)
            cap = got[case(mix, slot, gavel, knobs)]["time"] / bound[mix]
            caps.append(cap)
            print(f"{mix:<5} {slot:>4.0f} {r['util']:>22.2f} {r['gavel_time']:>22.2f} "
                  f"{r['hadar_time']:>24.2f} {r['hadar_util']:>22.2f} {r['gavel_jct']:>21.2f} "
                  f"{cap:>12.2f}")  # fmt: skip
    for slot in (*slots, None):
        at = 0 if slot is None else slots.index(slot) * len(mixes)
        n = len(every) if slot is None else len(mixes)
        rows, cap = every[at : at + n], statistics.fmean(caps[at : at + n])
        label = "mean" if slot is None else f"mean {slot:g} s"
        print(f"{label:<10} {_mean(rows, 'util'):>22.2f} {_mean(rows, 'gavel_time'):>22.2f} "
              f"{_mean(rows, 'hadar_time'):>24.2f} {_mean(rows, 'hadar_util'):>22.2f} "
              f"{_mean(rows, 'gavel_jct'):>21.2f} {cap:>12.2f}")  # fmt: skip
    print(f"{'paper':<10} {PAPER['util']:>22.2f} {PAPER['gavel_time']:>22.2f} "
          f"{PAPER['hadar_time']:>24.2f} {'1.30':>22} {'2.23':>21}")  # fmt: skip


def _mean(rows: Sequence[Mapping[str, float]], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    from slurm_hetsched.core.fork_rounds import DEFAULT_ROUND_OVERHEAD_S, DEFAULT_STEP_EFFICIENCY
    from slurm_hetsched.sim.scenario_hadare import (
        BASE_S,
        MIXES,
        SLOTS_S,
        calibrate_base_s,
        calibration_makespan_s,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixes", help=f"M-1,M-3,... (default: all of {','.join(MIXES)})")
    parser.add_argument("--slots", help="slot lengths, s (default: 90,180,360)")
    overhead, efficiency = DEFAULT_ROUND_OVERHEAD_S, DEFAULT_STEP_EFFICIENCY
    parser.add_argument(
        "--overhead",
        type=float,
        default=overhead,
        help=f"averaging overhead, s per copy and round (default {overhead:g})",
    )
    parser.add_argument("--efficiency", type=float, default=efficiency,
                        help=f"an averaged step's worth (default {efficiency:g})")  # fmt: skip
    parser.add_argument("--sensitivity", action="store_true", help="mean ratios over GRID")
    parser.add_argument("--calibrate", action="store_true", help="re-derive BASE_S and stop")
    parser.add_argument("--procs", type=int, default=4, help="worker processes (default: 4)")
    args = parser.parse_args(argv)
    if args.calibrate:
        base = calibrate_base_s()
        print(f"BASE_S = {base:.1f} (shipped {BASE_S:g}): M-5 under gavel, mean over slots = "
              f"{calibration_makespan_s(base):.0f} s")  # fmt: skip
        return 0
    mixes = args.mixes.split(",") if args.mixes else list(MIXES)
    slots = [float(s) for s in args.slots.split(",")] if args.slots else list(SLOTS_S)
    knobs = (args.overhead, args.efficiency)
    started = time.perf_counter()
    names = (*MAIN, *EXTRA)
    cases = [case(m, s, n, knobs) for m in mixes for s in slots for n in names]
    if args.sensitivity:
        cases += [
            case(m, s, n, (o, e))
            for e, o in GRID
            for m in mixes
            for s in slots
            for n in ("hadare", "hadare_paper", "gavel_fork")
        ]
    got = run_all(sorted(set(cases)), args.procs)
    bound = bounds(mixes)
    print(f"HadarE setting: {len(got)} simulations in {time.perf_counter() - started:.0f} s; "
          f"forking: up to 5 copies, overhead {args.overhead:g} s per copy and averaged round, "
          f"averaged steps worth {args.efficiency:g}; BASE_S {BASE_S:g} s")  # fmt: skip
    print("\nLeast makespan with perfect forking (LP bound), s: "
          + ", ".join(f"{m} {bound[m]:.0f}" for m in mixes))  # fmt: skip
    print_tables(got, mixes, slots, names, knobs)
    print("\nForked copy-rounds: averaged rounds / copies placed but not started, all slots")
    for n in ("hadare", "hadare_paper", "gavel_fork"):
        cells = [
            "{}/{}".format(*(sum(int(got[case(m, s, n, knobs)][k]) for s in slots)
                             for k in ("averaged", "not_started")))
            for m in mixes
        ]  # fmt: skip
        print(f"{n:<13} " + ", ".join(f"{m} {c}" for m, c in zip(mixes, cells, strict=True)))
    print_ratios(got, mixes, slots, MAIN, knobs, bound,
                 "Ratios, our hadar (paper: hadare/hadar util = 1.56 / 1.20 on AWS)")  # fmt: skip
    print_ratios(got, mixes, slots, ("gavel", "hadar_paper", "hadare_paper"), knobs, bound,
                 "Ratios, hadar with the paper's pricing")  # fmt: skip
    print_ratios(got, mixes, slots, ("gavel", "gavel", "gavel_fork"), knobs, bound,
                 "Ratios, max-min fairness with forking (the simple case)")  # fmt: skip
    if args.sensitivity:
        print("\nMean ratios over mixes and slots against the forking knobs")
        print_header(f"{'efficiency':>10} {'overhead s':>10} {'scheduler':>13} "
                     f"{'util x gavel':>12} {'gavel/time':>10} {'hadar/time':>10}")  # fmt: skip
        for e, o in GRID:
            for forked, base in (("hadare", "hadar"), ("hadare_paper", "hadar_paper"),
                                 ("gavel_fork", "gavel")):  # fmt: skip
                rows = [ratios(got, m, s, (o, e), ("gavel", base, forked))
                        for m in mixes for s in slots]  # fmt: skip
                util, g_time = _mean(rows, "util"), _mean(rows, "gavel_time")
                print(f"{e:>10.2f} {o:>10.0f} {forked:>13} {util:>12.2f} {g_time:>10.2f} "
                      f"{_mean(rows, 'hadar_time'):>10.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
