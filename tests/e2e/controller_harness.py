"""Running the real `hetsched controller` against the dev cluster from a test.

`LiveController` writes a config into the test's folder (its own store, lock and state root)
and runs the controller as a separate process, exactly as an admin would: one round at a time
(`once`), as a service (`start`), or killed at a chosen point (a `[testing] failpoint`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend, SlurmJob
from slurm_hetsched.store.sqlite import SqliteStore
from tests.integration.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]


class LiveController:
    """A controller with its own config, store and state root in `folder`."""

    def __init__(
        self,
        folder: Path,
        slurm_conf: str,
        state_root: Path,
        *,
        policy: str = "max_min_fairness_perf",
        round_s: float = 5.0,
        throughputs: Path | None = None,
        command_timeout_s: float = 30.0,
        retries: int = 1,
        resubmit_environment: dict[str, str] | None = None,
        ack_timeout_s: float = 30.0,
        requeue_timeout_s: float = 60.0,
        moves: str = "plain",
        restart_s: float | None = None,
        policy_options: dict[str, float] | None = None,
        extra_toml: str = "",
    ) -> None:
        """`moves` is "plain" unless a test asks otherwise: the move-protocol tests need a
        job checkpointed within a few short rounds, which amortized moves (the product's
        default, tested on their own in test_amortized_moves.py) would rightly not do."""
        self.folder = folder
        self.store_path = folder / "rounds.sqlite"
        self.config = folder / "hetsched.toml"
        lines = [
            "[controller]",
            f"round_s = {round_s}",
            f"policy = {json.dumps(policy)}",
            "min_reset_interval_s = 0.0",
            f"store = {json.dumps(str(self.store_path))}",
            f"state_root = {json.dumps(str(state_root))}",
            f"ack_timeout_s = {ack_timeout_s}",
            f"requeue_timeout_s = {requeue_timeout_s}",
            'log_level = "info"',
        ]
        if policy_options:
            pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in policy_options.items())
            lines.append(f"policy_options = {{ {pairs} }}")
        if resubmit_environment:
            pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in resubmit_environment.items())
            lines.append(f"resubmit_environment = {{ {pairs} }}")
        lines += [
            "[slurm]",
            f"conf = {json.dumps(slurm_conf)}",
            f"command_timeout_s = {command_timeout_s}",
            f"retries = {retries}",
            "retry_backoff_s = 0.2",
        ]
        if throughputs is not None:
            lines += ["[site]", f"throughputs = {json.dumps(str(throughputs))}"]
        lines += ["[moves]", f"mechanism = {json.dumps(moves)}"]
        if restart_s is not None:
            lines.append(f"restart_s = {restart_s}")
        self.config.write_text("\n".join(lines) + "\n" + extra_toml)

    def argv(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "slurm_hetsched.cli",
            "controller",
            "--config",
            str(self.config),
            *extra,
        ]

    def command(self, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        """Another hetsched command (rounds, status) on this controller's config."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "slurm_hetsched.cli",
                name,
                "--config",
                str(self.config),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=REPO,
        )

    def once(
        self, *extra: str, failpoint: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """One round (`--once`); with `failpoint` (`after:<action>`, or `<action>` for
        after it), the controller SIGKILLs itself there."""
        config = self.config
        if failpoint is not None:
            when = failpoint if ":" in failpoint else f"after:{failpoint}"
            config = self.folder / "hetsched-failpoint.toml"
            text = self.config.read_text() + f"[testing]\nfailpoint = {json.dumps(when)}\n"
            config.write_text(text)
        argv = self.argv("--once", *extra)
        argv[argv.index(str(self.config))] = str(config)
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=REPO,
        )
        if check and failpoint is None:
            assert done.returncode == 0, done.stderr[-3000:]
        return done

    def start(self) -> subprocess.Popen[str]:
        """The service, running rounds until terminated; its stderr goes to `log`."""
        self.log = self.folder / "controller.log"
        with self.log.open("w") as log:
            return subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, text=True, cwd=REPO
            )

    def store(self) -> SqliteStore:
        return SqliteStore(self.store_path)


def placed_jobs(controller: LiveController) -> dict[str, str]:
    """Job key -> node list of the jobs the last recorded round placed."""
    store = controller.store()
    try:
        record = store.load()
    finally:
        store.close()
    if record is None:
        return {}
    return {key: ",".join(p.nodes) for key, p in record.plan.placements.items()}


def wait_settled(
    backend: CliSlurmBackend, job_ids: Sequence[str], timeout_s: float = 90
) -> dict[str, SlurmJob]:
    """Wait until none of the jobs is between states (COMPLETING, or released but not yet
    started); returns their records by id."""
    wanted = set(job_ids)

    def probe() -> dict[str, SlurmJob] | None:
        jobs = {j.job_id: j for j in backend.list_jobs() if j.job_id in wanted}
        for job in jobs.values():
            if job.state.value == "COMPLETING":
                return None
            if job.state.value == "PENDING" and not job.held:
                return None
        return jobs

    return wait_for(probe, f"jobs {sorted(wanted)} to settle", timeout_s, every_s=0.5)


@contextlib.contextmanager
def drained(backend: CliSlurmBackend, nodes: Sequence[str]) -> Iterator[None]:
    """Nodes out of service for the test (DRAIN), back in service afterwards."""
    for node in nodes:
        backend.cli.run(
            ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=hetsched-test"]
        )
    try:
        yield
    finally:
        for node in nodes:
            backend.cli.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        wait_for(
            lambda: all(n.available for n in backend.list_nodes() if n.name in nodes),
            f"nodes {list(nodes)} back in service",
            30,
        )


def wait_all_done(backend: CliSlurmBackend, job_ids: Sequence[str], timeout_s: float) -> None:
    def probe() -> bool:
        states = {j.job_id: j.state.value for j in backend.list_jobs() if j.job_id in job_ids}
        return all(states.get(j) == "COMPLETED" for j in job_ids)

    wait_for(probe, f"jobs {list(job_ids)} completed", timeout_s, every_s=1.0)


def now() -> float:
    return time.time()
