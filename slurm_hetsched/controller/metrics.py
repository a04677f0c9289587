"""Optional Prometheus metrics of the controller, in the text format, with no dependency.

`serve` answers GET /metrics from a daemon thread; the round loop updates a `Metrics` object.
"""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slurm_hetsched.errors import ConfigError

_HELP = {
    "hetsched_rounds_total": ("counter", "Rounds run (skipped ones included)."),
    "hetsched_rounds_skipped_total": ("counter", "Rounds skipped because Slurm did not answer."),
    "hetsched_moves_total": ("counter", "Jobs moved to other GPUs (checkpoint, requeue, place)."),
    "hetsched_starts_total": ("counter", "Held jobs started on the GPUs a round gave them."),
    "hetsched_stops_total": ("counter", "Running jobs checkpointed and held for a later round."),
    "hetsched_actions_failed_total": ("counter", "Jobs whose action failed in a round."),
    "hetsched_solve_seconds": ("gauge", "Solver time of the last recomputed allocation."),
    "hetsched_round_phase_seconds": ("gauge", "Seconds of each phase of the last round."),
    "hetsched_queue_jobs": ("gauge", "Managed jobs with work left (running or queued)."),
    "hetsched_gpus_busy": ("gauge", "GPUs of each type given to managed jobs last round."),
    "hetsched_gpus_total": ("gauge", "GPUs of each type on available nodes."),
}


class Metrics:
    """The values behind /metrics; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def add(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[(name, tuple(sorted(labels.items())))] = float(value)

    def value(self, name: str, **labels: str) -> float | None:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))))

    def observe_round(self, summary: Any) -> None:
        """Update from one round's summary (controller/service.py RoundSummary)."""
        fields = summary.fields
        self.add("hetsched_rounds_total")
        if "skipped" in fields:
            self.add("hetsched_rounds_skipped_total")
            return
        self.add("hetsched_moves_total", fields.get("moved", 0) + fields.get("resubmitted", 0))
        self.add("hetsched_starts_total", fields.get("started", 0))
        self.add("hetsched_stops_total", fields.get("stopped", 0))
        self.add("hetsched_actions_failed_total", fields.get("failed", 0))
        self.set("hetsched_queue_jobs", fields.get("jobs", 0))
        if fields.get("recomputed"):
            self.set("hetsched_solve_seconds", fields.get("solve_s", 0.0))
        for phase in ("observe", "decide", "plan", "enact", "record"):
            if f"{phase}_s" in fields:
                self.set("hetsched_round_phase_seconds", fields[f"{phase}_s"], phase=phase)
        record = summary.record
        if record is not None and record.snapshot is not None:
            types = record.snapshot.gpu_types
            busy = dict.fromkeys(types, 0)
            for placement in record.plan.placements.values():
                for part in placement.slices:
                    busy[part.gpu_type] = busy.get(part.gpu_type, 0) + part.count
            for gpu_type in types:
                total = sum(n.gpus.get(gpu_type, 0) for n in record.snapshot.nodes if n.available)
                self.set("hetsched_gpus_busy", busy.get(gpu_type, 0), type=gpu_type)
                self.set("hetsched_gpus_total", total, type=gpu_type)

    def render(self) -> str:
        """The Prometheus text exposition of every value."""
        with self._lock:
            items = sorted(self._values.items())
        lines: list[str] = []
        for name, (kind, text) in _HELP.items():
            samples = [(labels, v) for (n, labels), v in items if n == name]
            if not samples and kind == "gauge":
                continue
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            if not samples:
                samples = [((), 0.0)]
            for labels, value in samples:
                label_text = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels)
                number = _sample_value(value)
                lines.append(f"{name}{{{label_text}}} {number}" if labels else f"{name} {number}")
        return "\n".join(lines) + "\n"


def _label_value(text: str) -> str:
    """A label value escaped as the text format requires (backslash, quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample_value(value: float) -> str:
    """A sample value in full precision (a counter past 999999 must not print as 1e+06)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


class MetricsServer:
    """The HTTP server of /metrics, running in a daemon thread."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve(metrics: Metrics, address: str, port: int) -> MetricsServer:
    """Answer GET /metrics on `address:port` (port 0: any free port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every few seconds would flood the log

    try:
        server = ThreadingHTTPServer((address, port), Handler)
    except OSError as exc:
        raise ConfigError(
            f"metrics.port {port} on {address}: cannot listen ({exc.strerror or exc}); "
            "choose a free port or leave metrics.port unset"
        ) from exc
    return MetricsServer(server)
