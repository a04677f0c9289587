"""What `hetsched controller`, `hetsched rounds` and `hetsched status` do (cli.py parses)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from datetime import datetime
from pathlib import Path
from typing import TextIO

from slurm_hetsched.controller.admin_comment import (
    describe_borrowing,
    describe_share,
    describe_target,
)
from slurm_hetsched.controller.config import ConfigError, ControllerConfig, effective_quotas
from slurm_hetsched.controller.dry_run import DryRunController
from slurm_hetsched.controller.enact import EnactSettings
from slurm_hetsched.controller.fork_tracker import ForkSettings
from slurm_hetsched.controller.observer import ObserveSettings, SlurmObserver
from slurm_hetsched.controller.restart_cost import RestartEstimate, describe_estimate
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.controller.round_report import unmeasured_estimates
from slurm_hetsched.controller.service import (
    Controller,
    RoundSummary,
    ServiceSettings,
    SingleControllerLock,
)
from slurm_hetsched.core.model.accounts import accounts_with
from slurm_hetsched.errors import HetschedError, SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.cli import SlurmCli
from slurm_hetsched.slurm.version import UnsupportedSlurmError
from slurm_hetsched.store.sqlite import SqliteStore

logger = logging.getLogger(__name__)


def service_settings(config: ControllerConfig) -> ServiceSettings:
    """The service's settings from a loaded config."""
    site = config.site_data()
    unknown = sorted(set(config.restart_s_by_class) - set(site.table.classes))
    if unknown:
        logger.warning(
            "moves.restart_s_by_class names classes the throughput table does not know, so "
            "no job has them: %s",
            ", ".join(map(repr, unknown)),
        )
    read_quotas = None
    if config.quotas_from == "slurm":
        cli = _cli(config)
        read_quotas = lambda: effective_quotas(config, cli)  # noqa: E731  # each round
    elif config.tenant_quotas:
        site = dataclasses.replace(site, accounts=accounts_with(effective_quotas(config)))
    return ServiceSettings(
        policy=config.policy,
        policy_options=dict(config.policy_options),
        site=site,
        read_quotas=read_quotas,
        tick=config.tick_settings(),
        store_path=config.store,
        lock_path=config.lock_path,
        enact=EnactSettings(
            state_root=config.state_root,
            ack_timeout_s=config.ack_timeout_s,
            checkpoint_signal=config.checkpoint_signal,
            requeue_timeout_s=config.requeue_timeout_s,
            resubmit_environment=dict(config.resubmit_environment),
            failpoint=config.failpoint or "",
        ),
        observe=ObserveSettings(
            state_root=config.state_root,
            partitions=config.partitions,
            qos=config.qos,
            progress_max_age_s=config.progress_max_age_s,
            release_rejected=config.release_rejected,
            key_release_s=config.key_release_s,
        ),
        cli=_cli(config),
        restarts=config.restart_settings(),
        forks=ForkSettings(
            round_s=config.round_s,
            fork_default=config.fork_default,
            fork_max=config.fork_max,
            merge_timeout_s=config.fork_merge_timeout_s,
        ),
    )


def _cli(config: ControllerConfig) -> SlurmCli:
    return SlurmCli(
        slurm_conf=config.slurm_conf,
        timeout_s=config.command_timeout_s,
        bin_dir=config.bin_dir,
        retries=config.retries,
        retry_backoff_s=config.retry_backoff_s,
    )


def run_controller(
    config: ControllerConfig, *, once: bool, dry_run: bool, out: TextIO = sys.stdout
) -> int:
    """Run the service (or one round, or one dry round); returns the exit status.

    Raises:
        HetschedError: with `once` or `dry_run`, the round was skipped (Slurm did not answer,
            or the round failed): the message says why, and `hetsched` exits non-zero.
    """
    from slurm_hetsched.controller.logline import format_kv
    from slurm_hetsched.controller.metrics import Metrics, serve

    settings = service_settings(config)
    metrics = Metrics()
    server = None
    if config.metrics_port is not None and not dry_run:
        server = serve(metrics, config.metrics_address, config.metrics_port)
        logger.info("metrics on http://%s:%d/metrics", config.metrics_address, server.port)

    last: list[RoundSummary] = []

    def on_round(summary: RoundSummary) -> None:
        line = format_kv(**summary.fields)
        logger.info("%s", line)
        metrics.observe_round(summary)
        last[:] = [summary]

    if dry_run:
        slurm = CliSlurmBackend(settings.cli)
        release = slurm_release(slurm)
        dry = DryRunController(settings, slurm=slurm)
        logger.info("dry run: slurm=%s", release)

        def on_dry_round(summary: RoundSummary) -> None:
            on_round(summary)
            if "skipped" not in summary.fields:
                round_ = summary.fields.get("round", "-")
                print(f"dry run, round {round_}: nothing was changed", file=out)
                for entry in dry.planned:
                    print(f"  {entry}", file=out)

        try:
            dry.serve(once=True, on_round=on_dry_round)
        finally:
            dry.close()
        _fail_if_skipped(last)
        return 0
    # Before anything is made: a Slurm older than 22.05 is refused.
    slurm = CliSlurmBackend(settings.cli)
    release = slurm_release(slurm)
    with SingleControllerLock(settings.lock_path):
        controller = Controller(settings, slurm=slurm)
        logger.info(
            "controller started: policy=%s round_s=%g store=%s state_root=%s slurm=%s",
            settings.policy,
            settings.tick.round_s,
            settings.store_path,
            config.state_root,
            release,
        )
        try:
            controller.serve(once=once, on_round=on_round)
        finally:
            controller.close()
            if server is not None:
                server.close()
    if once:
        _fail_if_skipped(last)
    return 0


def slurm_release(slurm: CliSlurmBackend) -> str:
    """The Slurm release the backend runs, said once at start.

    Raises:
        UnsupportedSlurmError: it is older than 22.05 (the service refuses to start).
    """
    try:
        return str(slurm.version())
    except UnsupportedSlurmError:
        raise
    except SlurmError as exc:  # not installed yet, or slurmctld's host unreachable: rounds skip
        logger.warning("cannot tell Slurm's version yet: %s", exc)
        return "unknown"


def _fail_if_skipped(rounds: list[RoundSummary]) -> None:
    """A single round that was skipped fails the command (a script must not read it as done)."""
    if rounds and "skipped" in rounds[-1].fields:
        fields = rounds[-1].fields
        why = " ".join(str(fields.get("error", "")).split())  # one line on stderr
        raise HetschedError(f"round skipped ({fields['skipped']}): {why}")


def show_rounds(config: ControllerConfig, *, last: int | None, job: str | None, out: TextIO) -> int:
    from slurm_hetsched.controller.history import format_rounds

    if not config.store.exists():
        raise ConfigError(f"no rounds recorded yet: {config.store} does not exist")
    store = SqliteStore(config.store)
    try:
        records = store.rounds(last=last)
        first = records[0].round if records else 0
        actions = [a for a in store.actions(job_key=job) if a.round >= first]
        print(format_rounds(records, actions, job), file=out)
    finally:
        store.close()
    return 0


def show_status(config: ControllerConfig, *, out: TextIO) -> int:
    """Nodes, GPU types, managed jobs with their shares, and jobs not managed with why."""
    slurm = CliSlurmBackend(_cli(config))
    release = str(slurm.version())  # refuses a Slurm older than 22.05 before reading it
    store = SqliteStore(config.store) if config.store.exists() else None
    last = store.load() if store is not None else None
    # Measured in memory, as the service would: a restart that reported since its last round
    # shows at once.
    restarts = RestartTracker(store, config.restart_settings(), save=False)
    table = config.site_data().table
    observer = SlurmObserver(
        slurm,
        table,
        ObserveSettings(
            state_root=config.state_root,
            partitions=config.partitions,
            qos=config.qos,
            progress_max_age_s=config.progress_max_age_s,
            key_release_s=config.key_release_s,
        ),
        registry=store,
        restarts=restarts,
    )
    view = observer.read_view(last)
    print(f"Slurm {release} ({_where(config)})\n", file=out)
    print("NODE      STATE        GPUS                 IN USE (not managed)", file=out)
    for node, snap in zip(view.nodes, view.snapshot.nodes, strict=True):
        gpus = ",".join(f"{t}:{n}" for t, n in sorted(node.gpus.items())) or "-"
        used = ",".join(f"{t}:{n}" for t, n in sorted(snap.gpus_in_use.items()) if n) or "-"
        print(f"{node.name:<9} {node.state.lower():<12} {gpus:<20} {used}", file=out)
    types = view.snapshot.gpu_types
    capacity = view.snapshot.capacity(types)
    print(
        "\nGPU types free for managed jobs: "
        + (", ".join(f"{t}={int(c)}" for t, c in zip(types, capacity, strict=True)) or "none"),
        file=out,
    )
    estimated = [t for t in types if t in table.estimated_types]
    if estimated:
        print(f"estimated from datasheet figures (not profiled): {', '.join(estimated)}", file=out)
    when = datetime.fromtimestamp(last.now_s).isoformat(timespec="seconds") if last else "never"
    print(f"last round: {last.round if last else '-'} at {when}", file=out)
    print(f"\nMANAGED JOBS ({len(view.managed)})", file=out)
    print(
        f"{'KEY':<10} {'JOBID':<8} {'USER':<10} {'STATE':<10} {'CLASS':<28} GPUS "
        f"{'RESTART':<20} {'TARGET':<16} SHARE",
        file=out,
    )
    placements = last.plan.placements if last else {}
    measured = {j.key: j.measured_steps_per_s for j in view.snapshot.jobs}
    marked = False
    for key, job in sorted(view.managed.items()):
        shares = last.allocation.share(key) if last and key in last.allocation.job_ids else {}
        share = describe_share(
            shares, unmeasured_estimates(table, job, measured.get(key, {}), list(shares))
        )
        marked = marked or "~" in share
        if last is not None and key in last.allocation.waiting:
            share += f" waiting:{last.allocation.waiting[key]}"  # a pricing policy's why
        if last is not None and key in placements:  # a tenant policy's charge this round
            borrowing = describe_borrowing((last.allocation.payments or {}).get(key))
            share += f" {borrowing}" if borrowing else ""
        restart = describe_estimate(
            restarts.estimates.get(key, RestartEstimate(None, "default")), config.restart_s
        )
        print(
            f"{key:<10} {job.slurm_id:<8} {job.leader.user:<10} {job.state.value:<10} "
            f"{job.spec.job_class[:28]:<28} {job.num_gpus:<4} {restart:<20} "
            f"{describe_target(placements.get(key)):<16} {share}",
            file=out,
        )
    if marked:
        print(
            "~: steps/s on that type still an estimate (a class in no table, or a type "
            "not profiled), until the job is measured there",
            file=out,
        )
    print(
        f"\nNOT MANAGED ({len(view.rejected)}): jobs with a hetsched spec left to Slurm", file=out
    )
    for rejected in view.rejected:
        print(f"{rejected.job_id:<8} {rejected.user:<10} {rejected.reason}", file=out)
    if store is not None:
        store.close()
    return 0


def _where(config: ControllerConfig) -> str:
    return f"commands in {config.bin_dir}" if config.bin_dir else "commands on PATH"


def store_path_hint(path: Path) -> str:
    return f"{path} (set controller.store in the config)"


def show_tenants(config: ControllerConfig, *, out: TextIO, last: int | None = None) -> int:
    """Per account: quota, GPUs in use, GPU-hours borrowed and lent, payments, credits and
    the revenue fairness ratio (controller/tenants_report.py), over every recorded round or
    the `last` ones (payments of those rounds, jobs that finished in them). Reads the store
    only."""
    from slurm_hetsched.controller.tenants_report import format_tenants

    if not config.store.exists():
        raise ConfigError(f"no rounds recorded yet: {config.store} does not exist")
    try:
        quotas = effective_quotas(config, _cli(config))
    except (HetschedError, OSError) as exc:  # the ledger still reads without them
        logger.warning("tenant quotas not read: %s", exc)
        quotas = {}
    store = SqliteStore(config.store)
    try:
        records = store.rounds(last)
        # With --last, only the payments of those rounds (none when no round is recorded).
        since = 0 if last is None else records[0].round if records else sys.maxsize
        print(format_tenants(quotas, store.ledger(since), records), file=out)
    finally:
        store.close()
    return 0
