"""The whole GPU programme of docs/benchmarks.md in one command: every table, every figure beside its goal.

    python bench/gpu_programme.py --out reports/gpu                 # everything (tens of minutes)
    python bench/gpu_programme.py --only pytest tune ladder:gpt_tts_base oom
    python bench/gpu_programme.py --smoke --out /tmp/smoke          # CPU rehearsal on the tiny recipes

Sections (``--only`` picks some; they run in the order given):

- ``env``      torch/CUDA/driver versions and the GPU
- ``data``     the demo corpus (``--utterances``, labelled) and its feature caches
- ``pytest``   ``pytest -m gpu`` (the tests that skip without a GPU)
- ``tune``     ``estimate``, then ``tune`` at the default 5 % tolerance (timed; goal < 2 min) and again
               to 1 item (the true per-bucket maximum by bisection), side by side
- ``ladder:R`` ``speechtrain bench --ablate`` for recipe R (with the tuned sizes when ``tune`` ran for R)
- ``oom``      a real OOM: the tuned config trained under a per-process cap of half the memory, the OOM
               guard recovering; the same steps without the cap; samples and audio seen compared
- ``rtf:R``    R trained for a few steps, then ``speechtrain rtf`` on the device
- ``compile``  gpt_tts_base trained with torch.compile over bucketed shapes: dynamic None/False/True,
               recompiles and graph breaks counted, rate after compilation

Each section writes its JSON and logs under ``--out`` and appends its table to ``--out``/programme.md;
the tables are printed as they finish and once more at the end. A failing section is reported and
the next one runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GOALS = {
    "all_vs_baseline": 3.0,  # all-on speed-up over the plain loop, GPT-TTS base
    "peak_ratio": 0.40,  # peak memory / baseline peak at the same batch
    "mfu_bf16": 0.45,
    "data_wait": 0.03,
    "tune_tolerance": 0.05,
    "tune_seconds": 120.0,
    "vits_rtf": 0.01,
}
GIB = 1024**3
LADDERS = ("gpt_tts_base", "vocoder_hifigan", "vits", "classifier_cnn_lstm")


class Programme:
    def __init__(self, out: Path, data: Path, smoke: bool, steps: int, warmup: int, time_limit: float) -> None:
        self.repeat: int | None = None  # ladder passes (None: the bench's default)
        self.min_seconds: float | None = None
        self.skip: list[str] = []  # ladder rungs left out
        self.tune_runs: tuple[str, ...] = ("tuner", "exact")
        self.hard_end: float | None = None  # perf_counter() after which no command may still run
        self.out = out
        self.data = data
        self.smoke = smoke
        self.steps = steps
        self.warmup = warmup
        self.time_limit = time_limit
        self.tables: list[str] = []
        self.tuned: dict[str, Path] = {}
        out.mkdir(parents=True, exist_ok=True)
        self.device = "cpu" if smoke else "cuda"

    # ------------------------------------------------------------------ helpers
    def recipe(self, name: str) -> str:
        if self.smoke:
            name = {
                "gpt_tts_base": "gpt_tts_tiny",
                "vocoder_hifigan": "vocoder_hifigan_tiny",
                "vits": "vits_tiny",
                "classifier_cnn_lstm": "classifier_cnn_lstm_tiny",
            }.get(name, name)
        return f"recipes/{name}.yaml"

    def manifest(self, recipe: str) -> str:
        return str(self.data / "classes") if "classifier" in recipe else str(self.data)

    def common(self, recipe: str) -> list[str]:
        return [
            f"data.manifest={self.manifest(recipe)}",
            f"train.device={self.device}",
            "train.progress=false",
            "train.tensorboard=false",
        ]

    def sh(
        self, name: str, cmd: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> tuple[int, str, float]:
        """Run ``cmd``, streaming its output to OUT/logs/name.log (a killed section keeps what it printed),
        and return (rc, output, seconds). The timeout is clipped to what is left before ``--hard-deadline``."""
        log = self.out / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if self.hard_end is not None:
            timeout = min(timeout, max(1.0, self.hard_end - time.perf_counter()))
        print(f"$ {shlex.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        chunks: list[str] = []
        with open(log, "w") as f:
            f.write(f"$ {shlex.join(cmd)}\n")
            f.flush()
            p = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
            deadline = t0 + timeout
            assert p.stdout is not None
            os.set_blocking(p.stdout.fileno(), False)
            while True:
                line = p.stdout.readline()
                if line:
                    chunks.append(line)
                    f.write(line)
                    f.flush()
                    continue
                if p.poll() is not None:
                    rest = p.stdout.read() or ""
                    chunks.append(rest)
                    f.write(rest)
                    rc = p.returncode
                    break
                if time.perf_counter() > deadline:
                    p.kill()
                    p.wait()
                    chunks.append("\n[timed out]")
                    rc = 124
                    break
                time.sleep(0.05)
            dt = time.perf_counter() - t0
            f.write(f"\n[rc={rc}, {dt:.1f} s]\n")
        text = "".join(chunks)
        if rc != 0:
            print(text[-3000:], flush=True)
        return rc, text, dt

    def st(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "speechtrain", *args]

    def table(self, title: str, lines: list[str]) -> None:
        text = f"### {title}\n\n" + "\n".join(lines) + "\n"
        self.tables.append(text)
        with open(self.out / "programme.md", "a") as f:
            f.write(text + "\n")
        print("\n" + text, flush=True)

    # ------------------------------------------------------------------ sections
    def env(self) -> None:
        code = (
            "import torch, platform, json; d = torch.cuda.is_available();"
            "p = torch.cuda.get_device_properties(0) if d else None;"
            "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,"
            "'python': platform.python_version(),"
            "'gpu': p.name if p else None, 'memory_gib': round(p.total_memory / 2**30, 1) if p else None,"
            "'sms': p.multi_processor_count if p else None, 'cudnn': torch.backends.cudnn.version() if d else None}))"
        )
        rc, text, _ = self.sh("env", [sys.executable, "-c", code], 120)
        smi = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                capture_output=True,
                text=True,
            )
            if not self.smoke
            else None
        )
        lines = [f"- {text.strip().splitlines()[-1] if text.strip() else '?'}"]
        if smi is not None:
            lines.append(f"- nvidia-smi: {smi.stdout.strip()}")
        self.table("Environment", lines)

    def make_data(self) -> None:
        if not (self.data / "metadata.csv").is_file():
            n = "120" if self.smoke else str(self.utterances)
            rc, _, dt = self.sh(
                "make_dataset",
                self.st("make-dataset", str(self.data), "--utterances", n, "--seed", "0", "--labelled"),
                900,
            )
            if rc:
                raise RuntimeError("make-dataset failed")
        workers = str(min(16, os.cpu_count() or 2))
        for r in ("gpt_tts_base", "vocoder_hifigan", "vits", "classifier_cnn_lstm"):
            recipe = self.recipe(r)
            self.sh(
                f"prepare_{r}", self.st("prepare", self.manifest(recipe), "--config", recipe, "--workers", workers), 900
            )

    def pytest(self) -> None:
        # only the modules that hold GPU tests: the others may import what a bare GPU machine lacks
        files = sorted(str(f) for f in Path("tests").glob("test_*.py") if "mark.gpu" in f.read_text(encoding="utf-8"))
        rc, text, dt = self.sh(
            "pytest_gpu",
            [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rA", *files],
            900,
        )
        summary = [ln for ln in text.splitlines() if ln.startswith(("PASSED", "FAILED", "ERROR", "SKIPPED"))]
        tail = text.strip().splitlines()[-1] if text.strip() else "?"
        self.table(f"pytest -m gpu ({dt:.0f} s, rc {rc})", [f"- `{s}`" for s in summary] + [f"- **{tail}**"])

    def tune(self, r: str = "gpt_tts_base") -> None:
        recipe = self.recipe(r)
        base = self.common(recipe)
        est_json = self.out / f"estimate_{r}.json"
        self.sh(f"estimate_{r}", self.st("estimate", "--config", recipe, "--json", str(est_json), *base), 600)
        runs: dict[str, dict[str, Any]] = {}
        for label, extra in (
            ("tuner (memory, 5 %)", ["tune.objective=memory", "tune.tolerance=0.05"]),
            ("true max (bisection to 1 item)", ["tune.objective=memory", "tune.tolerance=0.001"]),
        ):
            key = "exact" if "true" in label else "tuner"
            if key not in self.tune_runs:
                continue
            yaml_out = self.out / f"tuned_{r}_{key}.yaml"
            js = self.out / f"tune_{r}_{key}.json"
            rc, text, dt = self.sh(
                f"tune_{r}_{key}",
                self.st("tune", "--config", recipe, "--out", str(yaml_out), "--json", str(js), *base, *extra)
                + (["tune.max_batch_size=8"] if self.smoke else []),
                1200,
            )
            if rc == 0:
                runs[key] = {"report": json.loads(js.read_text()), "wall": dt, "label": label, "yaml": yaml_out}
        if "tuner" in runs:
            self.tuned[r] = runs["tuner"]["yaml"]
        lines = []
        if "tuner" in runs:
            rep = runs["tuner"]["report"]
            lines.append(
                f"Budget {rep['budget_bytes'] / GIB if rep['budget_bytes'] else 0:.1f} GiB ({rep['budget_source']}). "
                f"Tuner: {rep['seconds']:.1f} s in the tuner, {runs['tuner']['wall']:.1f} s wall with start-up "
                f"(goal < {GOALS['tune_seconds']:.0f} s)."
            )
        if "exact" in runs:
            lines.append(f"True maximum: {runs['exact']['report']['seconds']:.1f} s in the tuner.")
        lines += [
            "",
            "| bucket | longest frames | tuner batch | true max | tuner / true | peak GiB | estimate GiB | est / peak "
            "| tuner trials |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        exact = {b["bucket"]: b for b in runs.get("exact", {}).get("report", {}).get("buckets", [])}
        for b in sorted(
            runs.get("tuner", {}).get("report", {}).get("buckets", []), key=lambda b: -b["max_item_frames"]
        ):
            e = exact.get(b["bucket"])
            ratio = f"{b['batch_size'] / e['batch_size']:.3f}" if e and e["batch_size"] else "-"
            peak = b.get("peak_memory_bytes")
            est = b.get("estimate_bytes")
            lines.append(
                f"| {b['bucket']} | {b['max_item_frames']} | {b['batch_size']} | "
                f"{e['batch_size'] if e else '-'} | {ratio} | "
                f"{peak / GIB if peak else 0:.2f} | {est / GIB if est else 0:.2f} | "
                f"{est / peak if est and peak else 0:.2f} | {len(b.get('trials', []))} ({b['limited_by']}) |"
            )
        if est_json.is_file():
            est = json.loads(est_json.read_text())
            lines.append("")
            lines.append(
                "`speechtrain estimate`: "
                + ", ".join(
                    f"{k}={v / GIB:.2f} GiB"
                    for k, v in est.items()
                    if k.endswith("_bytes") and isinstance(v, (int, float))
                )
            )
        self.table(f"Tune of {r} against the true per-bucket maximum", lines)

    def tuned_or_recipe(self, r: str) -> str:
        """The tuned config of ``r`` when ``tune`` ran (in this process or an earlier one), else the recipe."""
        path = self.tuned.get(r) or self.out / f"tuned_{r}_tuner.yaml"
        return str(path) if Path(path).is_file() else self.recipe(r)

    def ladder(self, r: str) -> None:
        recipe = self.tuned_or_recipe(r)
        js = self.out / f"ladder_{r}.json"
        md = self.out / f"ladder_{r}.md"
        cmd = self.st(
            "bench",
            "--config",
            recipe,
            "--ablate",
            "--steps",
            str(self.steps),
            "--warmup",
            str(self.warmup),
            "--time-limit",
            str(self.time_limit),
            "--json",
            str(js),
            "--markdown",
            str(md),
            *self.common(recipe),
        )
        cmd += self.ladder_options()
        if self.smoke and "compile" not in self.skip:
            cmd += ["--skip", "compile"]
        rc, text, dt = self.sh(f"ladder_{r}", cmd, 1800)
        if not js.is_file():
            self.table(f"Ladder {r}: failed (rc {rc})", ["```", text[-2000:], "```"])
            return
        rep = json.loads(js.read_text())
        lines = [md.read_text() if md.is_file() else "", f"({dt:.0f} s wall)", ""]
        lines += self.goals_for(r, rep)
        self.table(f"Ablation ladder: {r} ({self.device})", lines)

    def ladder_options(self) -> list[str]:
        opts = [a for rung in self.skip for a in ("--skip", rung)]
        if self.repeat:
            opts += ["--repeat", str(self.repeat)]
        if self.min_seconds is not None:
            opts += ["--min-seconds", str(self.min_seconds)]
        return opts

    def goals_for(self, r: str, rep: dict[str, Any]) -> list[str]:
        rows = {row["key"]: row for row in rep.get("runs", [])}
        base, all_ = rows.get("baseline"), rows.get("all")
        out = ["| goal | target | measured |", "|---|---|---|"]
        if base and all_ and base.get("audio_seconds_per_second"):
            sp = all_["audio_seconds_per_second"] / base["audio_seconds_per_second"]
            target = f">= {GOALS['all_vs_baseline']}x" if r == "gpt_tts_base" else "-"
            out.append(f"| all vs plain loop (audio-s/s) | {target} | {sp:.2f}x |")
        for key in ("activation_checkpointing", "precision", "all"):
            row = rows.get(key)
            if base and row and base.get("peak_memory_bytes") and row.get("peak_memory_bytes"):
                ratio = row["peak_memory_bytes"] / base["peak_memory_bytes"]
                bs = f"{row.get('mean_batch_size', 0):.1f} vs {base.get('mean_batch_size', 0):.1f} items"
                out.append(
                    f"| peak / baseline peak, {key} ({bs}) | <= {GOALS['peak_ratio']} at same batch | {ratio:.2f} |"
                )
        mfus = [
            (k, v.get("mfu")) for k, v in rows.items() if v and v.get("mfu") and v.get("precision") in ("bf16", "fp16")
        ]
        if mfus:
            k, m = max(mfus, key=lambda kv: kv[1])
            out.append(f"| best bf16 MFU ({k}) | >= {GOALS['mfu_bf16']:.0%} | {m:.1%} |")
        if all_ and all_.get("data_wait_fraction") is not None:
            out.append(f"| data wait, all | <= {GOALS['data_wait']:.0%} | {all_['data_wait_fraction']:.1%} |")
        return out

    def memory(self, r: str = "gpt_tts_base") -> None:
        """Peak memory of the memory-saving switches at the baseline's own batches (no bucketing, no tuning)."""
        recipe = self.recipe(r)
        rows = []
        for label, extra in (
            ("bf16 + SDPA", ["accel.precision=bf16", "accel.sdpa=true"]),
            (
                "bf16 + SDPA + activation checkpointing",
                ["accel.precision=bf16", "accel.sdpa=true", "accel.activation_checkpointing=true"],
            ),
        ):
            key = "ckpt" if "checkpointing" in label else "bf16"
            js = self.out / f"memory_{r}_{key}.json"
            cmd = self.st(
                "bench",
                "--config",
                recipe,
                "--steps",
                str(self.steps),
                "--warmup",
                str(self.warmup),
                "--time-limit",
                str(self.time_limit),
                "--json",
                str(js),
                *self.common(recipe),
                "data.bucketing=false",
                "data.max_frames=null",
                "data.bucket_batch_sizes=null",
                "data.num_workers=0",
                "accel.compile=false",
                *extra,
            ) + [a for a in self.ladder_options() if not a.startswith("--skip")]
            rc, text, dt = self.sh(f"memory_{r}_{key}", cmd, 900)
            if js.is_file():
                runs = {x["key"]: x for x in json.loads(js.read_text())["runs"]}
                rows.append((label, runs.get("baseline"), runs.get("config")))
        lines = [
            "| configuration | batch (mean items) | peak GiB | baseline peak GiB | ratio (goal <= 0.40) | speed-up |",
            "|---|---|---|---|---|---|",
        ]
        for label, b, c in rows:
            if not (b and c and b.get("peak_memory_bytes") and c.get("peak_memory_bytes")):
                continue
            lines.append(
                f"| {label} | {c['mean_batch_size']:.1f} vs {b['mean_batch_size']:.1f} | "
                f"{c['peak_memory_bytes'] / GIB:.2f} | "
                f"{b['peak_memory_bytes'] / GIB:.2f} | {c['peak_memory_bytes'] / b['peak_memory_bytes']:.2f} | "
                f"{c['audio_seconds_per_second'] / b['audio_seconds_per_second']:.2f}x |"
            )
        self.table(f"Peak memory at the baseline's batch: {r}", lines)

    def oom(self, r: str = "gpt_tts_base") -> None:
        recipe = self.tuned_or_recipe(r)
        steps = "6" if self.smoke else "40"
        rows = {}
        for label, extra, env in (
            ("capped (OOM guard)", ["train.memory_fraction=0.5"], None),
            ("uncapped", [], None),
        ):
            run_dir = self.out / "runs" / f"oom_{'capped' if 'capped' in label and 'un' not in label else 'free'}"
            if self.smoke and "capped" in label and "un" not in label:
                env = {"SPEECHTRAIN_INJECT_OOM_FRAMES": "2000"}
                extra = []
            rc, text, dt = self.sh(
                f"oom_{run_dir.name}",
                self.st(
                    "train",
                    "--config",
                    recipe,
                    *self.common(recipe),
                    f"train.max_steps={steps}",
                    "train.log_every=5",
                    "train.eval_every=100000",
                    "train.save_every=100000",
                    "train.eval_audio_samples=0",
                    f"train.output_dir={run_dir}",
                    *extra,
                ),
                1200,
                env,
            )
            last, events = {}, []
            mpath = run_dir / "metrics.jsonl"
            if mpath.is_file():
                for line in mpath.read_text().splitlines():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if row.get("split") == "train":
                        last = row
                        events += row.get("events", [])
            rows[label] = (rc, dt, last, events)
        lines = [
            "| run | rc | steps | samples seen | audio s seen | OOM recoveries | peak GiB | wall s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, (rc, dt, last, _ev) in rows.items():
            peak = last.get("mem_peak") or 0
            lines.append(
                f"| {label} | {rc} | {last.get('step')} | {last.get('samples_seen')} | "
                f"{last.get('audio_seconds_seen', 0):.1f} | {last.get('oom_recoveries')} | "
                f"{peak / GIB:.1f} | {dt:.0f} |"
            )
        capped = next(iter(rows.values()))
        lines.append("")
        lines += [f"- event: `{json.dumps(e)[:300]}`" for e in capped[3][:6]]
        self.table(f"Real OOM recovered mid-run: {r}", lines)

    def rtf(self, r: str) -> None:
        recipe = self.recipe(r)
        run_dir = self.out / "runs" / f"rtf_{r}"
        steps = "4" if self.smoke else "30"
        self.sh(
            f"rtf_train_{r}",
            self.st(
                "train",
                "--config",
                recipe,
                *self.common(recipe),
                f"train.max_steps={steps}",
                "train.eval_every=100000",
                f"train.save_every={steps}",
                "train.eval_audio_samples=0",
                f"train.output_dir={run_dir}",
            ),
            1200,
        )
        js = self.out / f"rtf_{r}.json"
        rc, text, dt = self.sh(
            f"rtf_{r}", self.st("rtf", str(run_dir), "--device", self.device, "--json", str(js)), 900
        )
        if not js.is_file():
            self.table(f"RTF {r}: failed (rc {rc})", ["```", text[-1500:], "```"])
            return
        res = json.loads(js.read_text())
        goal = f"<= {GOALS['vits_rtf']}" if r == "vits" else "-"
        keys = {k: v for k, v in res.items() if not isinstance(v, (list, dict))}
        self.table(
            f"RTF {r} ({self.device})",
            [f"goal {goal}", "", "| key | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in keys.items()],
        )

    def compile(self, r: str = "gpt_tts_base") -> None:
        recipe = self.tuned_or_recipe(r)
        steps = 6 if self.smoke else 60
        lines = [
            "| dynamic | rc | wall s | audio-s/s, last interval | recompiles | graph breaks |",
            "|---|---|---|---|---|---|",
        ]
        for dyn in ("null", "false", "true", "eager"):
            run_dir = self.out / "runs" / f"compile_{dyn}"
            extra = (
                ["accel.compile=false"] if dyn == "eager" else ["accel.compile=true", f"accel.compile_dynamic={dyn}"]
            )
            rc, text, dt = self.sh(
                f"compile_{dyn}",
                self.st(
                    "train",
                    "--config",
                    recipe,
                    *self.common(recipe),
                    *extra,
                    f"train.max_steps={steps}",
                    f"train.log_every={max(2, steps // 4)}",
                    "train.eval_every=100000",
                    "train.save_every=100000",
                    "train.eval_audio_samples=0",
                    f"train.output_dir={run_dir}",
                ),
                900,
            )
            rows = []
            mpath = run_dir / "metrics.jsonl"
            if mpath.is_file():
                for line in mpath.read_text().splitlines():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if row.get("split") == "train":
                        rows.append(row)
            last = rows[-1] if rows else {}
            lines.append(
                f"| {dyn} | {rc} | {dt:.0f} | {last.get('audio_seconds_per_second', 0):.1f} | "
                f"{last.get('recompiles', '-')} | "
                f"{last.get('graph_breaks', '-')} |"
            )
        self.table(f"torch.compile over bucketed shapes: {r} ({steps} steps)", lines)


def copy_results(out: Path, dest: Path) -> None:
    """programme.md and one tarball of every JSON, YAML and log (no checkpoints) into ``dest``."""
    import shutil
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    if (out / "programme.md").is_file():
        shutil.copy(out / "programme.md", dest / "programme.md")
    with tarfile.open(dest / "results.tar.gz", "w:gz") as tar:
        for f in sorted(out.rglob("*")):
            if (
                f.is_file()
                and f.suffix in (".json", ".jsonl", ".yaml", ".md", ".log", ".txt")
                and f.stat().st_size < 8e6
            ):
                tar.add(f, arcname=str(f.relative_to(out)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="reports/gpu", help="folder for tables, JSON and logs")
    p.add_argument("--data", default="data/demo_gpu", help="demo corpus (made when missing)")
    p.add_argument("--utterances", type=int, default=2000, help="utterances when the corpus is made")
    p.add_argument("--only", nargs="+", default=None, help="sections to run (default: all)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per ladder row")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps per ladder row")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds of timing per ladder row")
    p.add_argument("--smoke", action="store_true", help="CPU rehearsal with the tiny recipes")
    p.add_argument("--repeat", type=int, default=None, help="ladder passes (default: bench.repeat)")
    p.add_argument("--min-seconds", type=float, default=None, help="timed seconds per ladder row, at least")
    p.add_argument("--skip", nargs="*", default=[], help="ladder rungs to leave out (e.g. lightning cpu_allocator)")
    p.add_argument("--tune-runs", default="tuner,exact", help="which tunes the tune section runs: tuner,exact")
    p.add_argument(
        "--hard-deadline", type=float, default=None, help="kill any command still running after this many seconds"
    )
    p.add_argument("--deadline", type=float, default=None, help="start no section after this many seconds")
    p.add_argument(
        "--copy-to", default=None, help="after each section, copy programme.md and a tarball of the JSON/logs here"
    )
    args = p.parse_args(argv)
    prog = Programme(Path(args.out), Path(args.data), args.smoke, args.steps, args.warmup, args.time_limit)
    prog.utterances = args.utterances  # type: ignore[attr-defined]
    prog.repeat, prog.min_seconds, prog.skip = args.repeat, args.min_seconds, list(args.skip)
    prog.tune_runs = tuple(x for x in args.tune_runs.split(",") if x)
    if args.hard_deadline:
        prog.hard_end = time.perf_counter() + args.hard_deadline
    sections = args.only or (
        [
            "env",
            "data",
            "pytest",
            "tune",
            *(f"ladder:{r}" for r in LADDERS),
            "memory",
            "oom",
            "rtf:vits",
            "rtf:gpt_tts_base",
            "compile",
        ]
    )
    if any(s != "env" for s in sections) and "data" not in sections:
        sections.insert(1 if sections[0] == "env" else 0, "data")
    t0 = time.perf_counter()
    for s in sections:
        name, _, arg = s.partition(":")
        fn = {"data": prog.make_data}.get(name) or getattr(prog, name, None)
        if fn is None:
            print(f"unknown section {s}", file=sys.stderr)
            return 2
        elapsed = time.perf_counter() - t0
        if args.deadline and elapsed > args.deadline:
            prog.table(f"{s}: not run", [f"deadline: {elapsed:.0f} s > --deadline {args.deadline:g} s"])
            continue
        print(f"\n=== {s} ({elapsed:.0f} s) ===", flush=True)
        try:
            fn(arg) if arg else fn()
        except Exception as exc:  # a failing section must not cost the others their device minutes
            prog.table(f"{s}: failed", [f"`{type(exc).__name__}: {exc}`"])
        if args.copy_to:
            copy_results(prog.out, Path(args.copy_to))
    print(f"\n=== programme done in {time.perf_counter() - t0:.0f} s ===")
    print("\n".join(prog.tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
