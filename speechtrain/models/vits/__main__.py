"""``python -m speechtrain.models.vits --config recipes/vits.yaml [key=value ...]``: parameter counts.

The model is built on the ``meta`` device, so even the full model costs no memory and no time.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Print the generator, discriminator and total parameter counts of a VITS config."""
    import torch

    from speechtrain.config import load_config
    from speechtrain.registry import build_task

    p = argparse.ArgumentParser(prog="python -m speechtrain.models.vits", description=__doc__.split("\n")[0])
    p.add_argument("--config", "-c", default=None, help="YAML config (recipes/vits*.yaml)")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    cfg = load_config(args.config, ["model.name=vits", *args.overrides])
    with torch.device("meta"):
        counts = build_task(cfg).parameter_counts()
    for name, n in counts.items():
        print(f"{name:>13}: {n:>12,d}  ({n / 1e6:.2f}M)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
