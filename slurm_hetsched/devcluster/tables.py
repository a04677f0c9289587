"""The tables `hetsched devcluster status` prints: nodes with their GPU types, then jobs."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hetsched.slurm import SlurmJob, SlurmNode


def format_nodes(nodes: list[SlurmNode]) -> str:
    rows = [("NODE", "STATE", "GPUS (used/total)", "FEATURES", "PARTITIONS")]
    for node in nodes:
        gpus = ",".join(
            f"{t or 'gpu'}:{node.gpus_used.get(t, 0)}/{n}" for t, n in sorted(node.gpus.items())
        )
        state = "+".join((node.state.lower(), *(f.lower() for f in node.state_flags)))
        rows.append(
            (
                node.name,
                state,
                gpus or "-",
                ",".join(node.features) or "-",
                ",".join(node.partitions) or "-",
            )
        )
    return _table(rows)


def format_jobs(jobs: list[SlurmJob]) -> str:
    if not jobs:
        return "no jobs"
    rows = [("JOBID", "NAME", "USER", "STATE", "REASON", "GPUS/NODE", "FEATURES", "NODES")]
    for job in sorted(jobs, key=lambda j: (int(j.job_id), j.het_job_offset or 0)):
        request = job.gpus_per_node.gres() if job.gpus_per_node else "-"
        rows.append(
            (
                job.slurm_id,
                job.name[:20],
                job.user,
                job.state.value,
                job.reason if job.reason != "None" else "-",
                request,
                job.features or "-",
                job.nodes or "-",
            )
        )
    return _table(rows)


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
