"""The round information a managed job carries in its admin comment (docs/interfaces.md, "Round
visibility"): its format, when it is rewritten, and its length."""

from __future__ import annotations

from controller_builders import placement

from slurm_hetsched.controller.admin_comment import (
    describe_share,
    describe_target,
    format_admin_comment,
    format_rejected_comment,
    needs_update,
)


def test_the_documented_example() -> None:
    text = format_admin_comment(
        round_=42,
        placement=placement("j", ("n1", "v100", 2)),
        share={"p100": 0.39, "v100": 0.61, "k80": 0.0},
        priority=1.8,
        reason="moved:p100->v100",
    )
    assert text == "hetsched r=42 v100x2@n1 share=v100:.61,p100:.39 prio=1.8 moved:p100->v100"


def test_a_queued_job_without_share_or_priority() -> None:
    text = format_admin_comment(round_=3, placement=None, share={}, priority=None, reason="queued")
    assert text == "hetsched r=3 - share=- prio=- queued"


def test_priority_has_three_significant_digits() -> None:
    text = format_admin_comment(
        round_=1, placement=None, share={"k80": 1.0}, priority=12.3456, reason="queued"
    )
    assert "prio=12.3 " in text and "share=k80:1 " in text


def test_describe_target() -> None:
    assert describe_target(None) == "-"
    assert describe_target(placement("j", ("n1", "v100", 2))) == "v100x2@n1"
    spread = placement("j", ("n3", "k80", 4), ("n1", "v100", 2))
    assert describe_target(spread) == "k80x4@n3+v100x2@n1"


def test_describe_share_orders_largest_first_and_drops_crumbs() -> None:
    assert describe_share({}) == "-"
    assert describe_share({"v100": 0.0, "k80": 0.004}) == "-"
    assert describe_share({"k80": 0.25, "v100": 0.75}) == "v100:.75,k80:.25"
    # Ties by name; a share that rounds to a whole GPU-time reads 1.
    assert describe_share({"p100": 0.5, "k80": 0.5}) == "k80:.50,p100:.50"
    assert describe_share({"v100": 0.996}) == "v100:1"
    assert describe_share({"v100": 0.994}) == "v100:.99"
    assert describe_share({"v100": 0.05, "k80": 0.006}) == "v100:.05,k80:.01"


def test_needs_update_ignores_round_and_priority_only() -> None:
    old = "hetsched r=41 v100x2@n1 share=v100:.61,p100:.39 prio=1.2 kept"
    assert not needs_update(old, "hetsched r=42 v100x2@n1 share=v100:.61,p100:.39 prio=1.8 kept")
    assert not needs_update(old + "  ", "  " + old)
    assert needs_update(old, "hetsched r=42 p100x2@n2 share=v100:.61,p100:.39 prio=1.8 kept")
    assert needs_update(old, "hetsched r=42 v100x2@n1 share=v100:.5,p100:.5 prio=1.8 kept")
    assert needs_update(old, "hetsched r=42 v100x2@n1 share=v100:.61,p100:.39 prio=1.8 queued")
    assert needs_update("", old)
    assert needs_update("set by an admin", old)


def test_comments_are_capped() -> None:
    long_reason = "x" * 400
    text = format_admin_comment(
        round_=7, placement=None, share={}, priority=None, reason=long_reason
    )
    assert len(text) == 250 and text.startswith("hetsched r=7 - share=- prio=- xxx")
    rejected = format_rejected_comment("y" * 400)
    assert len(rejected) == 250 and rejected.startswith("hetsched not-managed: yyy")


def test_rejected_comment_is_one_line() -> None:
    text = format_rejected_comment("unknown key 'stepz';\n  valid keys:\tclass, steps")
    assert text == "hetsched not-managed: unknown key 'stepz'; valid keys: class, steps"
    assert not needs_update(
        text, format_rejected_comment("unknown key 'stepz'; valid keys: " + "class, steps")
    )


def test_a_share_on_an_estimated_type_is_marked() -> None:
    text = format_admin_comment(
        round_=7,
        placement=placement("j", ("n8", "a100", 1)),
        share={"a100": 0.61, "v100": 0.39},
        priority=1.0,
        reason="started",
        estimated=["a100"],
    )
    assert "share=a100~:.61,v100:.39" in text
    # Once measured there, the mark goes, and the comment is rewritten (its stable part).
    measured = text.replace("a100~", "a100")
    assert needs_update(text, measured)


def test_which_shares_are_still_estimates() -> None:
    from controller_builders import held

    from slurm_hetsched.controller.managed import ManagedJob
    from slurm_hetsched.controller.round_report import unmeasured_estimates
    from slurm_hetsched.core.jobspec import parse_job_spec
    from slurm_hetsched.core.throughput.prior import with_estimates
    from slurm_hetsched.data_files import shipped_gpu_types, shipped_throughputs

    table = with_estimates(shipped_throughputs(), shipped_gpu_types())

    def job(job_class: str) -> ManagedJob:
        spec = parse_job_spec(f"hetsched:class={job_class}", local_tz=None, now_s=0.0)  # type: ignore[arg-type]
        return ManagedJob(key="j", spec=spec, components=(held("1"),), num_gpus=1)

    known = job("ResNet-50 (batch size 64)")
    assert unmeasured_estimates(table, known, {}, ["v100", "a100"]) == ["a100"]
    assert unmeasured_estimates(table, known, {"a100": 3.0}, ["v100", "a100"]) == []
    new = job("my-own-model")
    assert unmeasured_estimates(table, new, {"v100": 1.0}, ["v100", "k80"]) == ["k80"]
    assert unmeasured_estimates(None, new, {}, ["v100"]) == []
