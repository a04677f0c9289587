"""The Prometheus metrics: served over real HTTP on a free port, in the text exposition format,
with the values of the rounds the service observed."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from controller_builders import placement, round_record

from slurm_hetsched.controller.metrics import Metrics, MetricsServer, serve
from slurm_hetsched.controller.service import RoundSummary
from slurm_hetsched.errors import ConfigError

_SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")


def fields(**changes: object) -> dict[str, object]:
    """A round's log fields as Controller.run_round builds them."""
    out: dict[str, object] = {
        "round": 2,
        "policy": "max_min_fairness_perf",
        "jobs": 3,
        "placed": 2,
        "kept": 1,
        "moved": 1,
        "started": 0,
        "stopped": 1,
        "resubmitted": 1,
        "no_ack": 0,
        "failed": 1,
        "rejected": 0,
        "recomputed": 1,
        "solve_s": 0.25,
        "round_s": 3.5,
        "observe_s": 0.125,
        "decide_s": 0.25,
        "plan_s": 0.0625,
        "enact_s": 3.0,
        "record_s": 0.0625,
    }
    out.update(changes)
    return out


def summary(**changes: object) -> RoundSummary:
    record = round_record(
        2,
        1_000.0,
        {"j1": {"v100": 1.0}, "j2": {"k80": 0.5}, "j3": {"k80": 0.5}},
        keep={"j1": placement("j1", ("n1", "v100", 2))},
        move={"j2": placement("j2", ("n3", "k80", 1))},
        stop=("j3",),
        recomputed=True,
        solve_s=0.25,
    )
    return RoundSummary(fields(**changes), record)


def samples(text: str) -> dict[tuple[str, str], float]:
    """(name, labels) -> value of every sample line."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        out[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return out


@pytest.fixture
def server() -> Iterator[tuple[Metrics, MetricsServer]]:
    metrics = Metrics()
    running = serve(metrics, "127.0.0.1", 0)
    yield metrics, running
    running.close()


def get(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def test_before_any_round_the_counters_are_zero(server: tuple[Metrics, MetricsServer]) -> None:
    _, running = server
    status, content_type, text = get(running.port)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert samples(text) == {
        ("hetsched_rounds_total", ""): 0.0,
        ("hetsched_rounds_skipped_total", ""): 0.0,
        ("hetsched_moves_total", ""): 0.0,
        ("hetsched_starts_total", ""): 0.0,
        ("hetsched_stops_total", ""): 0.0,
        ("hetsched_actions_failed_total", ""): 0.0,
    }
    assert "# TYPE hetsched_rounds_total counter" in text
    assert "# HELP hetsched_rounds_skipped_total Rounds skipped" in text


def test_rounds_are_counted_and_the_last_one_is_shown(
    server: tuple[Metrics, MetricsServer],
) -> None:
    metrics, running = server
    metrics.observe_round(summary())
    metrics.observe_round(RoundSummary({"skipped": "slurm-unavailable", "error": "down"}))
    metrics.observe_round(summary(moved=0, resubmitted=0, started=2, recomputed=0, solve_s=0.0))
    _, _, text = get(running.port)
    got = samples(text)
    assert got[("hetsched_rounds_total", "")] == 3
    assert got[("hetsched_rounds_skipped_total", "")] == 1
    assert got[("hetsched_moves_total", "")] == 2  # moved + resubmitted of the first round
    assert got[("hetsched_starts_total", "")] == 2
    assert got[("hetsched_stops_total", "")] == 2
    assert got[("hetsched_actions_failed_total", "")] == 2
    assert got[("hetsched_queue_jobs", "")] == 3
    # The last round reused its allocation: the solve time is the last recomputed one's.
    assert got[("hetsched_solve_seconds", "")] == 0.25
    assert got[("hetsched_round_phase_seconds", 'phase="enact"')] == 3.0
    assert got[("hetsched_round_phase_seconds", 'phase="observe"')] == 0.125
    # j1 holds 2 v100, j2 1 k80; n4's k80s are on a node that is down.
    assert got[("hetsched_gpus_busy", 'type="v100"')] == 2
    assert got[("hetsched_gpus_busy", 'type="k80"')] == 1
    assert got[("hetsched_gpus_busy", 'type="p100"')] == 0
    assert got[("hetsched_gpus_total", 'type="k80"')] == 4
    assert got[("hetsched_gpus_total", 'type="v100"')] == 2
    assert "# TYPE hetsched_gpus_busy gauge" in text


def test_large_counters_keep_every_digit() -> None:
    metrics = Metrics()
    metrics.add("hetsched_moves_total", 1_234_567)
    metrics.set("hetsched_solve_seconds", 0.1)
    got = metrics.render()
    assert "hetsched_moves_total 1234567\n" in got
    assert "hetsched_solve_seconds 0.1\n" in got


def test_label_values_are_escaped() -> None:
    metrics = Metrics()
    metrics.set("hetsched_gpus_total", 1, type='odd"type\\x\ny')
    assert 'hetsched_gpus_total{type="odd\\"type\\\\x\\ny"} 1\n' in metrics.render()


def test_only_metrics_is_served(server: tuple[Metrics, MetricsServer]) -> None:
    _, running = server
    with pytest.raises(urllib.error.HTTPError) as caught:
        get(running.port, "/")
    assert caught.value.code == 404
    status, _, _ = get(running.port, "/metrics?x=1")
    assert status == 200


def test_a_port_in_use_is_a_config_error_naming_the_key() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"metrics.port {port} on 127.0.0.1: cannot listen"):
            serve(Metrics(), "127.0.0.1", port)


def test_close_stops_serving() -> None:
    running = serve(Metrics(), "127.0.0.1", 0)
    port = running.port
    assert get(port)[0] == 200
    running.close()
    with pytest.raises(urllib.error.URLError):
        get(port)
