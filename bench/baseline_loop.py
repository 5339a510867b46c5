"""The plain PyTorch loop that `speechtrain bench` uses as its baseline, as a script.

    python bench/baseline_loop.py --config recipes/gpt_tts_tiny.yaml --steps 20 [key=value ...]

What a user writes before optimizing: fp32, DataLoader(batch_size=data.batch_size, shuffle=True)
with default settings and a pad-to-longest collate, plain AdamW per optimizer stage, the Task's
own training_step for the loss. The loop below is the whole of it; speechtrain.bench.baseline
holds the same pieces (PadCollate, PlainLoop) so that the bench measures exactly this.
Prints audio-seconds per second (and steps/s, samples/s) over the timed steps.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=None, help="YAML config (recipes/*.yaml)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps")
    p.add_argument("--fake-data", type=int, default=None, metavar="N", help="N synthetic utterances, no manifest")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)

    import torch

    from speechtrain.bench.baseline import PadCollate
    from speechtrain.config import load_config
    from speechtrain.device import resolve_device
    from speechtrain.recipes import build_task
    from speechtrain.recipes.bench import load_train_dataset

    cfg = load_config(args.config, args.overrides)
    torch.manual_seed(cfg.train.seed)
    task = build_task(cfg)
    needs = task.needs()
    dataset = load_train_dataset(cfg, needs, args.fake_data)
    task.setup(dataset)
    device = resolve_device(cfg.train.device)

    # --- the plain loop -------------------------------------------------------------------------
    collate = PadCollate(needs, dataset.hop_length, dataset.sample_rate, cfg.data.crop_frames)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=min(cfg.data.batch_size, len(dataset)), shuffle=True, collate_fn=collate, drop_last=True
    )
    modules = task.modules()
    stages = []
    for spec in task.optimizer_specs():
        params = [p for name in spec.modules for p in modules[name].to(device).parameters()]
        o = cfg.optim
        lr = o.lr * spec.lr_multiplier
        opt = torch.optim.AdamW(params, lr=lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
        stages.append((spec, params, opt))

    def step(batch):  # noqa: ANN001, ANN202
        batch = batch.to(device)
        cache: dict = {}
        for spec, params, opt in stages:
            opt.zero_grad(set_to_none=True)
            loss = task.training_step(batch, spec.name, cache)["loss"]
            loss.backward()
            clip = spec.grad_clip if spec.grad_clip is not None else cfg.optim.grad_clip
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()

    def batches():  # noqa: ANN202
        while True:
            yield from loader

    # ---------------------------------------------------------------------------------------------
    it = batches()
    for _ in range(args.warmup):
        step(next(it))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    audio = samples = 0.0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        batch = next(it)
        audio += batch.audio_seconds
        samples += batch.size
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    print(
        f"baseline loop on {device}: {audio / seconds:.2f} audio-s/s, {args.steps / seconds:.3f} steps/s, "
        f"{samples / seconds:.2f} samples/s ({args.steps} steps, {seconds:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
