"""Your own task, your own training loop, speechtrain's step runner and checkpointer.

    python examples/own_loop.py OUT_DIR [STEPS]

``examples/own_model.py`` hands a task to ``speechtrain train`` (speechtrain's loop). Here the loop is yours:
:func:`speechtrain.recipes.loop.build_parts` builds the parts the Trainer would run (from the typed config
sections, as every door of speechtrain does), and this loop drives two of them itself:

- ``parts.runner`` (:class:`speechtrain.train.step.StepRunner`): one optimizer step of every stage, with the
  OOM guard (a step split and redone after an out-of-memory error) and the numerics guard's skippable step
  (a non-finite loss or gradient changes no weight), without a host sync;
- ``parts.checkpointer`` (:class:`speechtrain.train.checkpointer.Checkpointer`): atomic ``step_N.pt`` files
  that keep the last ``train.keep_checkpoints``, and an exact resume (weights, optimizer, schedule, random
  streams, the run's counters in ``parts.state``).

Run it twice with more steps the second time: it continues from its last checkpoint.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from speechtrain.accel.apply import apply_accelerations
from speechtrain.config import load_config
from speechtrain.data.batch import Batch
from speechtrain.recipes.loop import build_parts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the task of examples/own_model.py

from examples.own_model import DenoiseTask  # noqa: E402

N_MELS = 16


def my_batch(seed: int) -> Batch:
    """Your data: here two random log-mel utterances of 24 and 17 frames."""
    g = torch.Generator().manual_seed(seed)
    lengths = [24, 17]
    mel = torch.full((len(lengths), N_MELS, max(lengths)), math.log(1e-5))
    for i, n in enumerate(lengths):
        mel[i, :, :n] = torch.randn(N_MELS, n, generator=g)
    ids = [f"utt{seed}_{i}" for i in range(len(lengths))]
    return Batch({"mel": mel, "mel_lengths": torch.tensor(lengths)}, ids, 256, 22050)


def train(out_dir: Path, steps: int, log_every: int = 5) -> list[float]:
    """Train to step ``steps`` (continuing ``out_dir``'s last checkpoint); the losses logged."""
    cfg = load_config(
        None,
        [
            f"data.n_mels={N_MELS}",
            "train.device=cpu",
            "accel.precision=fp32",
            f"train.max_steps={steps}",
            "train.keep_checkpoints=2",
            "train.tensorboard=false",
            "optim.lr=0.003",
        ],
    )
    torch.manual_seed(0)
    task = DenoiseTask(N_MELS, hidden=32, noise=0.5)
    device = torch.device("cpu")
    accel = apply_accelerations(cfg.accel, task.modules(), device)
    parts = build_parts(task, train=cfg.train, optim=cfg.optim, device=device, accel=accel, run_dir=out_dir)
    runner, checkpointer, state = parts.runner, parts.checkpointer, parts.state
    if checkpointer.resume():
        print(f"continuing from step {state.step}")
    losses = []
    while state.step < steps:
        done = runner.run([my_batch(state.step)], state.step, epoch=0)  # your batches, your order
        state.step += 1
        parts.optimizers.step_schedulers("step")
        if done.bad is not None:
            runner.numerics.observe(done.bad)  # counted on the device: no host sync here
        if state.step % log_every == 0 or state.step == steps:
            runner.numerics.settle(state.step, parts.optimizers.precision)  # the host reads the counts here
            losses.append(float(done.out["loss"]))
            print(f"step {state.step}: loss {losses[-1]:.4f}")
            checkpointer.save()
    return losses


if __name__ == "__main__":
    train(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20)
