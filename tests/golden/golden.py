"""Golden per-step losses of the tiny recipes: the behaviour that refactors must keep.

    python -m tests.golden.golden --write     # re-pin (only for a deliberate change of behaviour; say why)

Each tiny recipe trains ``STEPS`` steps with a fixed seed, one torch thread, no loader workers, on the
40-utterance demo corpus, and every loss of every step (``metrics.jsonl`` with ``log_every=1``) is
recorded in ``losses.json`` with the fingerprint of the machine that wrote it (torch version and the
CPU's vector units). On a machine with the same fingerprint the test requires the same numbers bit
for bit; elsewhere within a relative 1e-4.

The instruction set is pinned to AVX2 (``PINNED_ISA``): each recipe trains in a child process started with
ATen's, oneDNN's and MKL's kernel choice capped at AVX2, so that a CPU with AVX-512 runs the kernels an
AVX2-only CPU runs. Unpinned, an AVX-512 machine's kernels sum in another order and the HiFi-GAN losses leave
the 1e-4 tolerance by step 3 (192.634 against 192.704). The caps only lower a choice: on an AVX2-only CPU
they change nothing, so values pinned there stand.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).with_name("losses.json")
STEPS = 6
RECIPES = ("gpt_tts_tiny", "vocoder_hifigan_tiny", "vits_tiny", "classifier_cnn_lstm_tiny")
REPO = Path(__file__).resolve().parents[2]
# Read by ATen (ATEN_CPU_CAPABILITY), oneDNN (ONEDNN_MAX_CPU_ISA) and MKL (MKL_ENABLE_INSTRUCTIONS) when the
# library first dispatches, so they must be in the environment of a process before torch loads.
PINNED_ISA = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def fingerprint() -> dict[str, Any]:
    import torch

    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    units = sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2", "fma")))
    return {"torch": torch.__version__, "machine": platform.machine(), "cpu_units": units}


def run_recipe(name: str, corpus: Path, workdir: Path) -> list[dict[str, float]]:
    """Per-step losses of recipe ``name`` trained for ``STEPS`` steps on ``corpus``, in a child process whose
    instruction set is pinned (``PINNED_ISA``)."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        **PINNED_ISA,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "tests.golden.golden", "--recipe", name, str(corpus), str(workdir)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed in its pinned child (rc {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_recipe_here(name: str, corpus: Path, workdir: Path) -> list[dict[str, float]]:
    import torch

    from speechtrain.config import load_config
    from speechtrain.recipes.train import train_from_config

    manifest = corpus / "classes" if "classifier" in name else corpus
    out = workdir / name
    cfg = load_config(
        REPO / "recipes" / f"{name}.yaml",
        [
            f"data.manifest={manifest}",
            f"data.cache_dir={workdir / 'cache'}",
            "data.num_workers=0",
            "data.persistent_workers=false",
            "data.num_buckets=10",  # the count the values were pinned with (before num_buckets=auto)
            "data.symbols=ascii",  # the symbol set they were pinned with (before symbols learned from the corpus)
            f"train.max_steps={STEPS}",
            "train.log_every=1",
            "train.eval_every=100000",
            "train.save_every=100000",
            "train.eval_audio_samples=0",
            "train.progress=false",
            "train.tensorboard=false",
            "train.device=cpu",
            f"train.output_dir={out}",
        ],
    )
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_from_config(cfg)
    finally:
        torch.set_num_threads(before)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = []
    for row in rows:
        if row.get("split") != "train":
            continue
        steps.append({k: float(v) for k, v in sorted(row.items()) if "loss" in k and isinstance(v, (int, float))})
    return steps


def compare(got: list[dict[str, float]], want: list[dict[str, float]], exact: bool) -> list[str]:
    """Differences between two loss histories (empty when they agree)."""
    problems = []
    if len(got) != len(want):
        return [f"{len(got)} steps logged, golden has {len(want)}"]
    for i, (g, w) in enumerate(zip(got, want)):
        if set(g) != set(w):
            problems.append(f"step {i + 1}: keys {sorted(g)} != golden {sorted(w)}")
            continue
        for k in w:
            same = g[k] == w[k] if exact else math.isclose(g[k], w[k], rel_tol=1e-4, abs_tol=1e-6)
            if not same:
                problems.append(f"step {i + 1} {k}: {g[k]!r} != golden {w[k]!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    import tempfile

    from speechtrain.data.demo import make_demo_corpus

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="write losses.json (else compare and print)")
    p.add_argument("--recipe", nargs=3, metavar=("NAME", "CORPUS", "WORKDIR"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.recipe:  # the pinned child of run_recipe: the losses as one JSON line on stdout
        name, corpus_dir, workdir = args.recipe
        print(json.dumps(_run_recipe_here(name, Path(corpus_dir), Path(workdir))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_demo_corpus(Path(tmp) / "corpus", utterances=40, seed=0, labelled=True)
        result = {name: run_recipe(name, corpus, Path(tmp)) for name in RECIPES}
    if args.write:
        pinned = {"fingerprint": fingerprint(), "steps": STEPS, "recipes": result}
        GOLDEN.write_text(json.dumps(pinned, indent=1) + "\n")
        print(f"wrote {GOLDEN}")
        return 0
    want = json.loads(GOLDEN.read_text())
    exact = want["fingerprint"] == fingerprint()
    bad = {n: compare(result[n], want["recipes"][n], exact) for n in RECIPES}
    for n, problems in bad.items():
        print(f"{n}: {'ok' if not problems else '; '.join(problems[:5])}")
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
