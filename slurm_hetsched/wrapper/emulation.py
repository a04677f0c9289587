"""EMULATION ONLY (off by default): make a CPU-only dev cluster behave like a heterogeneous one.

On the dev cluster every "GPU" is fake and training runs at CPU speed whatever the type. With
HETSCHED_EMULATE_GPU_SPEED=1 the wrapper stretches each step by

    factor = (steps/s of the job's class on the fastest GPU type) / (steps/s on its type)

from the throughput table (Gavel's measurements, shipped with the package), at the job's GPU
count. A job on a K80 then trains slower than on a V100 in the same ratio as Gavel measured,
so the controller's measurements and moves can be demonstrated. Never turn it on for real
training: it only ever slows a job down.

The job's class comes from HETSCHED_JOB_CLASS, else from `class=` in the job's Slurm comment
(the job spec). HETSCHED_EMULATE_RATES (e.g. `v100=3,p100=2,k80=1`) replaces the table's rates
with the speeds it names, whatever the class, so a class that is in no table can be emulated
(`hetsched profile`'s test, jobs of an unknown class). Anything missing (unknown GPU type or
class) turns the emulation off with a warning; it never stops training.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from slurm_hetsched.wrapper.env import JobEnvironment

logger = logging.getLogger(__name__)


class StepStretch:
    """Sleeps after each step so that it lasts `factor` times as long as it really did.

    Args:
        factor: >= 1; 1 changes nothing.
        sleep: injected by tests.
    """

    def __init__(self, factor: float, sleep: Callable[[float], None] = time.sleep) -> None:
        if not factor >= 1.0:
            raise ValueError(f"a step stretch factor must be >= 1, got {factor}")
        self.factor = factor
        self._sleep = sleep

    def after_step(self, step_s: float) -> None:
        """Stretch a step that took `step_s` seconds."""
        if self.factor > 1.0 and step_s > 0:
            self._sleep(step_s * (self.factor - 1.0))


def class_from_comment(comment: str) -> str | None:
    """The `class=` of a valid job spec comment ('hetsched:class=...;steps=...'), or None."""
    from datetime import UTC

    from slurm_hetsched.core.jobspec import JobSpecError, parse_job_spec

    try:
        return parse_job_spec(comment, local_tz=UTC, now_s=time.time()).job_class
    except JobSpecError:
        return None


def _class_from_slurm(job_id: str | None) -> str | None:
    if job_id is None:
        return None
    from slurm_hetsched.errors import HetschedError
    from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli

    try:
        return class_from_comment(CliSlurmBackend(SlurmCli(timeout_s=10)).job(job_id).comment)
    except (HetschedError, OSError) as exc:
        logger.info("cannot read job %s's comment from Slurm: %s", job_id, exc)
        return None


def shipped_rates(job_class: str, num_gpus: int) -> Mapping[str, float]:
    """Steps/s of `job_class` at `num_gpus` per GPU type, from the shipped table.

    Reads the table through slurm_hetsched.data_files (numpy, no solver; a unit test checks
    that nothing of the policies or cvxpy is imported).
    """
    from slurm_hetsched.data_files import shipped_throughputs

    table = shipped_throughputs()
    return {t: table.steps_per_s(job_class, t, num_gpus) for t in table.gpu_types}


def build_step_stretch(
    env: JobEnvironment,
    gpu_type: str,
    num_gpus: int,
    *,
    rates: Callable[[str, int], Mapping[str, float]] = shipped_rates,
    job_class: Callable[[str | None], str | None] = _class_from_slurm,
) -> StepStretch | None:
    """The stretch for this job, or None (with a warning saying why) when it cannot be had.

    Args:
        env: the job's environment (job class, job id; `emulate_rates`, when set, are the
            speeds to emulate, and neither the class nor the table is consulted).
        gpu_type: the type the job runs on.
        num_gpus: the job's GPUs (its row of the table).
        rates, job_class: the table and the Slurm lookup; injected by tests.
    """
    if env.emulate_rates is not None:
        who, origin, unit = "the job", "relative speeds of HETSCHED_EMULATE_RATES", ""
        per_type: Mapping[str, float] = dict(env.emulate_rates)
    else:
        name = env.job_class or job_class(env.job_id)
        who, origin, unit = f"class {name!r}", "Gavel's table", " steps/s"
        if not name:
            logger.warning(
                "EMULATION off: no job class; set HETSCHED_JOB_CLASS or class= in the job's "
                "comment (or the speeds in HETSCHED_EMULATE_RATES)"
            )
            return None
        try:
            per_type = rates(name, max(1, num_gpus))
        except Exception as exc:  # unknown class, unreadable table: never stop training for it
            logger.warning("EMULATION off: no throughputs for class %r: %s", name, exc)
            return None
    mine = per_type.get(gpu_type, 0.0)
    fastest_type = max(per_type, key=lambda t: per_type[t], default=None)
    if fastest_type is None or mine <= 0:
        logger.warning(
            "EMULATION off: %s has no throughput on GPU type %r (%s)", who, gpu_type, origin
        )
        return None
    factor = per_type[fastest_type] / mine
    logger.warning(
        "EMULATION on (HETSCHED_EMULATE_GPU_SPEED): every step is stretched x%.2f: %s runs "
        "%.3g%s on %s vs %.3g on %s (%s)",
        factor,
        who,
        mine,
        unit,
        gpu_type,
        per_type[fastest_type],
        fastest_type,
        origin,
    )
    return StepStretch(factor)
