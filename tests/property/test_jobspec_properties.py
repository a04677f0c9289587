"""Properties of the job spec parser (core/jobspec.py) on hostile text, and of what it accepts.

Any user can write any comment, and the controller parses every managed job's comment every
round; one comment must never stop scheduling for everyone. So:
1. on any text the parser either returns a spec within the documented bounds or raises
   JobSpecError with a short single-line message, never anything else;
2. every spec it accepts, at every bound (steps 1 and STEPS_MAX, weight WEIGHT_MIN and
   WEIGHT_MAX, tw 0 and TW_MAX, due ten years either side of now, gpus 1 and the cluster's
   largest node, mem from its smallest value up to the most memory a type that can run the job
   has), gives a problem every registered policy solves, and a round plan the round mechanism
   makes, next to ordinary jobs and to other jobs at their bounds; and neither the allocation
   nor the plan ever gives a job a type with less memory than its `mem=`.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone, tzinfo

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_hetsched.core import jobspec
from slurm_hetsched.core.jobspec import JobSpec, JobSpecError, parse_job_spec
from slurm_hetsched.core.mechanism import RoundOptions, plan_round
from slurm_hetsched.core.model import Allocation, ClusterSnapshot, Job, Node, RoundState
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.base import round_options_for
from slurm_hetsched.core.problem import SiteData, build_problem
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs

TOL = 1e-6
MESSAGE_MAX = 180  # one line: the unknown-key message lists every key
ROUND_S = 360.0
NOW_S = datetime(2026, 6, 1, tzinfo=UTC).timestamp()
TABLE = shipped_throughputs()
SITE = SiteData(TABLE, shipped_gpu_types(), shipped_site_energy())
TYPES = ("k80", "p100", "v100")
ZONES: tuple[tzinfo, ...] = (
    UTC,
    timezone(timedelta(hours=1)),
    timezone(timedelta(hours=23, minutes=59)),
    timezone(-timedelta(hours=23, minutes=59)),
)
# Every registered policy: the controller may run any of them on any accepted spec.
ALL_POLICIES = sorted(POLICIES)
# The makespan policies report inf when a job with steps left gets no time: next to a job of
# STEPS_MAX steps, a job of a few thousand needs a share below solver noise (base.NOISE), so it
# gets none. That is the makespan objective at work (the allocation is valid), not a failure.
INF_OBJECTIVE = {n for n in POLICIES if n.startswith("min_total_duration")}
TEXT = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOLVE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------
# 1. Hostile text


def check_outcome(comment: str, now_s: float, local_tz: tzinfo) -> JobSpec | None:
    """Parse `comment`: a spec within the bounds, or None after a well-formed JobSpecError
    (anything else propagates and fails the test)."""
    try:
        spec = parse_job_spec(comment, local_tz=local_tz, now_s=now_s)
    except JobSpecError as exc:
        message = str(exc)
        assert 0 < len(message) <= MESSAGE_MAX and "\n" not in message, message
        return None
    assert len(comment.strip()) <= jobspec.SPEC_MAX
    assert 1 <= len(spec.job_class) <= jobspec.CLASS_MAX and spec.job_class.isprintable()
    assert spec.steps is None or 1 <= spec.steps <= jobspec.STEPS_MAX
    assert jobspec.WEIGHT_MIN <= spec.weight <= jobspec.WEIGHT_MAX
    assert 0.0 <= spec.tardiness_weight <= jobspec.TW_MAX
    assert spec.due_s is None or abs(spec.due_s - now_s) <= jobspec.DUE_WITHIN_S
    assert spec.gpus is None or 1 <= spec.gpus <= jobspec.GPUS_MAX
    assert spec.key is None or jobspec.valid_job_key(spec.key)
    assert 0 <= spec.copy <= jobspec.COPY_MAX
    assert spec.mem_gib is None or 0 < spec.mem_gib <= jobspec.MEM_GIB_MAX
    utility = spec.utility
    assert 0 < utility.max_utility <= jobspec.UMAX_MAX
    assert utility.target_s is None or 0 < utility.target_s <= jobspec.TARGET_MAX_S
    assert 0 <= utility.sharpness_per_h <= jobspec.SHARP_MAX
    # Bounded and never rising, from arrival to far beyond any target or due date.
    values = [utility.value(now_s + t, now_s) for t in (0.0, 1.0, 3600.0, 1e7, 1e9, 1e12)]
    assert all(0.0 <= v <= utility.max_utility for v in values)
    assert all(a >= b for a, b in itertools.pairwise(values))
    return spec


def _iso(when_s: float) -> str:
    return datetime.fromtimestamp(when_s, UTC).isoformat().replace("+00:00", "Z")


NOW = st.one_of(st.just(NOW_S), st.floats(0.0, 4e9))
HOSTILE_WORDS = [
    "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-0", "+0", "-0.0", "0x10", "0b1", "1_000",
    "1e308", "1e-308", "1e999", "-1e999", "4.9e-324", "1e", "e5", ".", "+", "++1", "1..2",
    "\u0661\u0662", "\uff11\uff12", "\u00b2", "\u2155", "", " ", "..", ".", "a/b", "../../x",
    "/etc/passwd", "a\\b", "$(reboot)", "`id`", "a|b", "a&&b", "'", '"', "\x00", "\x1b[31m",
    "\u202e", "\ud800", "\U0001f600", "=", "==", ";", "hetsched:", "0001-01-01T00:00+23:59",
    "9999-12-31T23:59:59.999999-23:59", "2026-02-30", "2026-W01", "20261201T1200Z",
    str(jobspec.STEPS_MAX), str(jobspec.STEPS_MAX + 1), "1e-3", "0.000999", "1e3", "1000.0001",
]  # fmt: skip
HOSTILE_KEYS = [*jobspec.KEYS, "", " ", "..", "a/b", "STEPS", "class ", "k" * 200, "due\x00"]


@st.composite
def hostile_values(draw: st.DrawFn) -> str:
    """Values no field accepts, values near the bounds, and arbitrary text."""
    now = NOW_S + draw(st.sampled_from([-1.0, 0.0, 1.0])) * jobspec.DUE_WITHIN_S
    value: str = draw(
        st.one_of(
            st.sampled_from(HOSTILE_WORDS),
            st.integers(-(10**30), 10**30).map(str),
            st.integers(0, 3000).map(lambda n: "9" * n),
            st.floats().map(repr),
            st.floats().map(lambda f: f"{f:.40g}"),
            st.builds(lambda m, e: f"{m}e{e}", st.floats(0, 10).map(repr), st.integers(-400, 400)),
            st.floats(-5e8, 5e8).map(
                lambda d: datetime.fromtimestamp(now + d, UTC).isoformat().replace("+00:00", "Z")
            ),
            st.datetimes().map(datetime.isoformat),
            st.text(max_size=60),
            st.text(alphabet="0123456789.eE+-_xX ", max_size=30),
        )
    )
    return value


# Per key: values at its bounds (accepted), then just outside them (refused).
INSIDE = {
    "class": ["A", "c" * jobspec.CLASS_MAX, " A ", "ResNet-50 (batch size 64)"],
    "steps": ["1", str(jobspec.STEPS_MAX), " 1 ", "0" * 12 + "1"],
    "weight": ["1e-3", "0.001", "1E3", "+1000", "1000.0", ".001"],
    "tw": ["0", "+0", "0e-999", "1e3", "1000."],
    "due": [_iso(NOW_S + sign * jobspec.DUE_WITHIN_S) for sign in (-1, 0, 1)],
    "gpus": ["1", str(jobspec.GPUS_MAX), "0001"],
    "key": ["a", "k" * jobspec.JOB_KEY_MAX, "a.", "1_2", "-", "+"],
    "copy": ["0", str(jobspec.COPY_MAX), "0000"],
    "fork": ["1", str(jobspec.FORK_MAX), "03"],
    "mem": ["1e-300", "0.001G", "4096", "4096GiB", "4096.0G", "+4.096e3", "40G", " 12.5 "],
    "preempt": ["yes", "no", "NO", " Yes "],
}
OUTSIDE = {
    "class": ["", "c" * (jobspec.CLASS_MAX + 1), "A\x00", "A\tB", "A\x7f"],
    "steps": ["0", str(jobspec.STEPS_MAX + 1), "-1", "+1", "1.0", "00" + str(jobspec.STEPS_MAX)],
    "weight": ["0.000999999", "1000.000001", "-1e-3", "0", "1e308", "nan", "inf"],
    "tw": ["-0", "-1e-300", "1000.000001", "1e308", "nan", "inf"],
    "due": [_iso(NOW_S + sign * (jobspec.DUE_WITHIN_S + 1)) for sign in (-1, 1)],
    "gpus": ["0", str(jobspec.GPUS_MAX + 1), "00001", "1.0"],
    "key": ["", "k" * (jobspec.JOB_KEY_MAX + 1), ".a", ".", "..", "a/b", "a b"],
    "copy": ["-1", str(jobspec.COPY_MAX + 1), "00000", "1e2"],
    "fork": ["0", str(jobspec.FORK_MAX + 1), "-1", "2.0", "003"],
    "mem": ["0", "0G", "-1", "4096.000001", "4097GiB", "1e-400", "40GB", "40 G", "nan", "inf"],
    "preempt": ["", "y", "true", "0", "no!", "yes no"],
}


# The utility keys depend on one another (target= needs utility=, ...): utility_specs below.
UTILITY_KEYS = ("utility", "umax", "target", "sharp")
PLAIN_KEYS = tuple(k for k in jobspec.KEYS if k not in UTILITY_KEYS)
UTILITY_INSIDE = {
    "umax": ["1e-300", "1e6", "100", " 0.5 "],
    "target": ["1", "1s", "0.001m", "87660h", "3652.5d", str(int(jobspec.TARGET_MAX_S)), "6h"],
    "sharp": ["0", "3600", "1e-9", "2"],
}
UTILITY_OUTSIDE = {
    "umax": ["0", "1000000.1", "-1", "nan", "inf"],
    "target": ["0", "0h", "3653d", "1y", "-1h", "6 h", "nan", "h", ""],
    "sharp": ["-1", "3600.001", "inf"],
}


@st.composite
def utility_specs(draw: st.DrawFn) -> tuple[str, bool]:
    """A spec with `utility=` of each kind and its keys at their bounds or just outside, and
    whether it must be accepted."""
    kind = draw(st.sampled_from(["sigmoid", "linear", "deadline"]))
    pairs = [("class", "A"), ("utility", kind)]
    accepted = True
    keys = ["umax", "target"] + (["sharp"] if kind == "sigmoid" else [])
    for key in keys:
        if key != "target" and draw(st.booleans()):
            continue  # optional
        if draw(st.integers(0, 4)) == 0:
            pairs.append((key, draw(st.sampled_from(UTILITY_OUTSIDE[key]))))
            accepted = False
        else:
            pairs.append((key, draw(st.sampled_from(UTILITY_INSIDE[key]))))
    text = "hetsched:" + ";".join(f"{k}={v}" for k, v in draw(st.permutations(pairs)))
    return text, accepted


@TEXT
@given(case=utility_specs())
def test_utility_keys_at_their_bounds_pass_and_just_outside_fail(case: tuple[str, bool]) -> None:
    comment, accepted = case
    spec = check_outcome(comment, NOW_S, UTC)
    assert (spec is not None) == accepted, comment


@st.composite
def edge_specs(draw: st.DrawFn) -> tuple[str, bool | None]:
    """`hetsched:` and each known key at most once, with values at its bounds, just outside
    them or hostile; and whether the spec must be accepted (None: a hostile value decides)."""
    keys = draw(st.lists(st.sampled_from(PLAIN_KEYS), unique=True, max_size=len(PLAIN_KEYS)))
    pairs = [("class", "A")] if "class" not in keys else []
    accepted: bool | None = True
    for key in keys:
        kind = draw(st.integers(0, 9))  # 0: hostile, 1: just outside, else at a bound
        if kind == 0:
            pairs.append((key, draw(hostile_values())))
            if accepted:
                accepted = None
        elif kind == 1:
            pairs.append((key, draw(st.sampled_from(OUTSIDE[key]))))
            accepted = False
        else:
            pairs.append((key, draw(st.sampled_from(INSIDE[key]))))
    text = "hetsched:" + ";".join(f"{k}={v}" for k, v in draw(st.permutations(pairs)))
    return text, accepted


@st.composite
def hostile_specs(draw: st.DrawFn) -> str:
    """`hetsched:` and key=value pairs: unknown, repeated, path-like and overlong keys, and
    hostile values; sometimes with the separators and spaces mangled."""
    keys = st.one_of(st.sampled_from(HOSTILE_KEYS), st.text(max_size=12))
    pairs = draw(st.lists(st.tuples(keys, hostile_values()), max_size=10))
    if draw(st.booleans()):
        pairs.insert(0, ("class", draw(st.sampled_from(TABLE.classes))))
    sep = draw(st.sampled_from([";", ";", " ; ", ";;"]))
    return draw(st.sampled_from(["hetsched:", " hetsched:", "hetsched: "])) + sep.join(
        f"{k}={v}" for k, v in pairs
    )


@TEXT
@given(comment=st.text(), now_s=NOW, zone=st.sampled_from(ZONES))
def test_any_text_gives_a_bounded_spec_or_a_short_error(
    comment: str, now_s: float, zone: tzinfo
) -> None:
    check_outcome(comment, now_s, zone)
    check_outcome("hetsched:" + comment, now_s, zone)
    check_outcome("hetsched:class=A;" + comment, now_s, zone)


@TEXT
@given(comment=hostile_specs(), zone=st.sampled_from(ZONES))
def test_hostile_pairs_give_a_bounded_spec_or_a_short_error(comment: str, zone: tzinfo) -> None:
    check_outcome(comment, NOW_S, zone)


@TEXT
@given(case=edge_specs())
def test_values_at_the_bounds_pass_and_just_outside_fail(case: tuple[str, bool | None]) -> None:
    comment, accepted = case
    spec = check_outcome(comment, NOW_S, UTC)
    assert accepted is None or (spec is not None) == accepted, comment


# ----------------------------------------------------------------------------------------------
# 2. Every accepted spec, at its bounds, is solved


def runnable_classes(num_gpus: int, capacity: dict[str, int]) -> list[str]:
    """Classes the controller admits at `num_gpus` on this cluster (as jobview does: a rate
    > 0 on some type), restricted to types with room for the job."""
    types = sorted(capacity)
    fits = np.array([capacity[t] >= num_gpus for t in types])
    return [c for c in TABLE.classes if ((TABLE.row(c, num_gpus, types) > 0) & fits).any()]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Node, ...]:
    """1 to 4 nodes of one GPU type each, with 1, 2, 4 or 8 GPUs (the counts the shipped
    table measures), none in use by others."""
    layout = draw(
        st.lists(
            st.tuples(st.sampled_from(TYPES), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=4
        )
    )
    return tuple(Node(f"n{i}", {t: g}) for i, (t, g) in enumerate(layout))


def spec_job(spec: JobSpec, key: str, num_gpus: int, arrival_s: float) -> Job:
    """The model job of a spec as the controller builds it (controller/snapshot.py
    `snapshot_job`, before any progress report)."""
    steps = None if spec.steps is None else float(spec.steps)
    return Job(
        key=key,
        job_class=spec.job_class,
        num_gpus=num_gpus,
        steps_remaining=steps,
        total_steps=steps,
        weight=spec.weight,
        arrival_s=arrival_s,
        due_s=spec.due_s,
        tardiness_weight=spec.tardiness_weight,
        mem_gib=spec.mem_gib,
    )


def memory_of(gpu_type: str) -> float:
    mem_gib = SITE.gpu_types[gpu_type].mem_gib
    assert mem_gib is not None, f"the shipped catalog gives {gpu_type}'s memory"
    return mem_gib


@st.composite
def bounded_spec_texts(
    draw: st.DrawFn, job_class: str, num_gpus: int, room: float = jobspec.MEM_GIB_MAX
) -> str:
    """A spec for `job_class` on `num_gpus` GPUs with every field at a bound or inside,
    written as users might (exponents, '+', spaces); `mem=` (if drawn) at most `room` GiB,
    the most memory of a type that can run the job."""
    steps = draw(
        st.one_of(st.sampled_from([1, jobspec.STEPS_MAX]), st.integers(1, jobspec.STEPS_MAX))
    )
    weight = draw(
        st.one_of(
            st.sampled_from(["1e-3", "0.001", "1e3", "+1000", "1"]),
            st.floats(jobspec.WEIGHT_MIN, jobspec.WEIGHT_MAX).map(repr),
        )
    )
    tw = draw(
        st.one_of(
            st.sampled_from(["0", "1e3", "1000.0", "1e-9"]),
            st.floats(0.0, jobspec.TW_MAX).map(repr),
        )
    )
    due = draw(
        st.one_of(
            st.none(),
            st.sampled_from([-jobspec.DUE_WITHIN_S, jobspec.DUE_WITHIN_S, 0.0]),
            st.floats(-jobspec.DUE_WITHIN_S, jobspec.DUE_WITHIN_S),
        )
    )
    pairs = [f"class={job_class}", f"steps={steps}", f"weight={weight}", f"tw={tw}"]
    if due is not None:
        pairs.append(f"due={_iso(NOW_S + due)}")
    if draw(st.booleans()):
        pairs.append(f"gpus={num_gpus}")
    if draw(st.booleans()):
        pairs.append(f"copy={draw(st.sampled_from([0, jobspec.COPY_MAX]))}")
    if draw(st.booleans()):
        # The smallest need, exactly the room (fits), or in between: types below are ruled out.
        mem = draw(st.one_of(st.sampled_from([1e-9, room]), st.floats(1e-9, room)))
        pairs.append(f"mem={mem!r}{draw(st.sampled_from(['', 'G', 'GiB']))}")
    order = draw(st.permutations(pairs))
    return "hetsched:" + " ; ".join(order)


@st.composite
def bounded_cases(draw: st.DrawFn) -> ClusterSnapshot:
    """A cluster with 1 to 3 jobs from accepted specs at their bounds and 1 to 3 ordinary
    jobs, each on a GPU count up to the cluster's largest node that its class can run on."""
    nodes = draw(clusters())
    capacity = {
        t: sum(n.gpus.get(t, 0) for n in nodes) for t in TYPES if any(t in n.gpus for n in nodes)
    }
    largest = max(max(n.gpus.values()) for n in nodes)
    counts = [
        g for g in sorted({1, 2, 4, 8, largest}) if g <= largest and runnable_classes(g, capacity)
    ]
    jobs = []
    for m in range(draw(st.integers(1, 3))):
        g = draw(st.sampled_from(sorted({1, largest} & set(counts)) or counts))
        job_class = draw(st.sampled_from(runnable_classes(g, capacity)))
        rates = TABLE.row(job_class, g, TYPES)
        room = max(
            memory_of(t)
            for t, rate in zip(TYPES, rates, strict=True)
            if rate > 0 and capacity.get(t, 0) >= g
        )
        text = draw(bounded_spec_texts(job_class, g, room))
        spec = parse_job_spec(text, local_tz=UTC, now_s=NOW_S)  # must be accepted
        jobs.append(spec_job(spec, f"s{m}", g, NOW_S - draw(st.sampled_from([0.0, 3600.0]))))
    for m in range(draw(st.integers(1, 3))):
        g = draw(st.sampled_from(counts))
        job_class = draw(st.sampled_from(runnable_classes(g, capacity)))
        spec = JobSpec(job_class=job_class, steps=20000)
        jobs.append(spec_job(spec, f"o{m}", g, NOW_S - 600.0 * m))
    return ClusterSnapshot(NOW_S, nodes, tuple(jobs))


def assert_solved(name: str, snapshot: ClusterSnapshot) -> Allocation:
    """`name` solves the snapshot's problem: shares finite in [0, 1] within capacity, none on
    a type with less memory than the job needs, and the round mechanism turns the allocation
    into a plan that fits the free GPUs and places no job where it cannot fit."""
    problem = build_problem(snapshot, SITE)
    policy = get_policy(name)
    alloc = policy.allocate(problem)
    x = alloc.x
    assert x.shape == (problem.n_jobs, problem.n_types)
    assert np.isfinite(x).all() and (x >= 0).all() and (x <= 1).all()
    assert (x.sum(axis=1) <= 1 + TOL).all()
    assert (problem.num_gpus @ x <= problem.capacity + TOL).all()
    assert np.isfinite(alloc.objective) or (name in INF_OBJECTIVE and alloc.objective == np.inf)
    need = {job.key: job.mem_gib or 0.0 for job in snapshot.jobs}
    too_small = np.array(
        [[need[j] > memory_of(t) for t in problem.gpu_types] for j in problem.job_ids]
    ).reshape(x.shape)
    assert (x[too_small] <= TOL).all()
    plan, _ = plan_round(
        alloc,
        RoundState.initial(snapshot.gpu_types),
        snapshot,
        ROUND_S,
        options=round_options_for(policy, RoundOptions()),
        table=TABLE,
        catalog=SITE.gpu_types,
    )
    left = {(n.name, t): n.free_gpus(t) for n in snapshot.nodes for t in n.gpus}
    for job_id, placement in plan.placements.items():
        assert need[job_id] <= memory_of(placement.gpu_types[0]), (job_id, placement)
        for piece in placement.slices:
            left[piece.node, piece.gpu_type] -= piece.count
    assert min(left.values()) >= 0, left
    return alloc


@pytest.mark.parametrize("name", ALL_POLICIES)
@SOLVE
@given(snapshot=bounded_cases())
def test_accepted_specs_at_their_bounds_are_solved(name: str, snapshot: ClusterSnapshot) -> None:
    assert_solved(name, snapshot)


CORNERS = list(
    itertools.product(
        ["1", str(jobspec.STEPS_MAX)],
        ["1e-3", "1e3"],
        [None, _iso(NOW_S - jobspec.DUE_WITHIN_S), _iso(NOW_S + jobspec.DUE_WITHIN_S)],
        ["0", "1e3"],
        [1, 8],
    )
)
CORNER_NODES = (Node("n1", {"v100": 8}), Node("n2", {"v100": 4}), Node("n3", {"p100": 4}))
RESNET = "ResNet-50 (batch size 64)"


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_every_corner_of_the_bounds_is_solved(name: str) -> None:
    ordinary = tuple(
        Job(f"o{m}", RESNET, num_gpus=g, steps_remaining=2e4, total_steps=2e4, arrival_s=NOW_S)
        for m, g in enumerate([1, 2, 4])
    )
    for steps, weight, due, tw, gpus in CORNERS:
        text = f"hetsched:class={RESNET};steps={steps};weight={weight};tw={tw};gpus={gpus}"
        if due is not None:
            text += f";due={due}"
        spec = parse_job_spec(text, local_tz=UTC, now_s=NOW_S)
        hostile = spec_job(spec, "x", gpus, NOW_S)
        assert_solved(name, ClusterSnapshot(NOW_S, CORNER_NODES, (hostile, *ordinary)))
