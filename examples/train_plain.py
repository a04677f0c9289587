"""The job-side wrapper without PyTorch: a plain-Python training loop with JobSession.

It fits y = 3x - 2 by stochastic gradient descent on data generated from the seed, with only
the standard library, so it runs under any Python 3.11 that can import slurm_hetsched. It
shows the generic API: a save function, a load function, and `step_done()` after each step
(progress.json, checkpoint signal -> checkpoint + ack.json + pause, periodic checkpoints,
SIGTERM).

    python examples/train_plain.py --steps 200 --seed 0
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time

from slurm_hetsched.wrapper import CheckpointReader, CheckpointWriter, JobSession


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0, help="pad each step to this")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("HETSCHED_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    state = {"w": 0.0, "b": 0.0, "rng": random.Random(args.seed)}

    def save(writer: CheckpointWriter) -> None:
        writer.save_object(
            "state.bin", {"w": state["w"], "b": state["b"], "rng": state["rng"].getstate()}
        )

    def load(reader: CheckpointReader) -> None:
        saved = reader.load_object("state.bin")
        state["w"], state["b"] = saved["w"], saved["b"]
        state["rng"].setstate(saved["rng"])

    with JobSession(total_steps=args.steps, save=save, load=load) as session:
        while not session.finished:
            started = time.monotonic()
            rng = state["rng"]
            x = rng.uniform(-1, 1)
            error = state["w"] * x + state["b"] - (3 * x - 2 + rng.gauss(0, 0.01))
            state["w"] -= 0.1 * error * x
            state["b"] -= 0.1 * error
            print(f"step={session.step + 1} w={state['w']:.6f} b={state['b']:.6f}", flush=True)
            time.sleep(max(0.0, args.step_time_s - (time.monotonic() - started)))
            session.step_done()
    print(f"final steps={session.step} w={state['w']!r} b={state['b']!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
