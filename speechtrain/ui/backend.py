"""The UI's one door into the library: every call the web page makes into speechtrain goes through here.

The data, training and recipe layers are being reshaped; keeping their call sites in this one
module means a moved function is fixed in one place. Long work (prepare, train, tune, bench) is not
done here: it runs as the ordinary CLI in a background process (:mod:`speechtrain.ui.jobs`); what
this module builds for those is the command line. Quick work (probe, estimate, plan, synthesize,
vocode, classify) is called in the UI process. Bad input raises the library's own
:class:`~speechtrain.errors.UserError`, whose text the page shows as the CLI would print it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speechtrain.data.layouts import names as layout_names
from speechtrain.errors import DataError, UserError
from speechtrain.quality.judge import JUDGE_RECIPES
from speechtrain.ui.uploads import CODE_SUFFIXES as CODE_SUFFIXES  # uploads are bounded and checked there
from speechtrain.ui.uploads import extract_zip as extract_zip
from speechtrain.ui.uploads import unpack_upload as unpack_upload

REPO_RECIPES = Path(__file__).resolve().parents[2] / "recipes"
FORMATS = ("auto", *layout_names())  # every layout that declares itself in speechtrain.data.layouts


# --------------------------------------------------------------------------------------------- recipes
def recipe_dirs(extra: list[Path] | None = None) -> list[Path]:
    """Folders searched for recipes: ./recipes, the repository's recipes/, then ``extra`` (tuned configs)."""
    dirs = [Path.cwd() / "recipes", REPO_RECIPES, *(extra or [])]
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


def list_recipes(extra: list[Path] | None = None) -> list[str]:
    """Recipe names (file stems) of the recipe folders; tuned configs are listed by path."""
    names: list[str] = []
    for d in recipe_dirs(extra):
        for p in sorted(d.glob("*.yaml")):
            if p.stem in JUDGE_RECIPES:  # a judge's settings, not a training config
                continue
            name = p.stem if d in recipe_dirs() else str(p)
            if name not in names:
                names.append(name)
    return names


def recipe_path(name: str) -> Path:
    """A recipe by name (recipes/NAME.yaml) or by path; UserError naming where it looked."""
    from speechtrain.recipes.common import find_recipe

    if not name:
        raise UserError("choose a recipe (e.g. gpt_tts_tiny)")
    return find_recipe(name)


def data_overrides(recipe: str, data: str | None, fmt: str = "auto") -> list[str]:
    """``data.manifest`` (and ``data.format``) pointing the recipe at ``data``.

    Recipes name ``data/demo`` (or ``data/demo/classes`` for classifiers); the same sub-path of
    ``data`` is used when it exists, as ``speechtrain demo`` does."""
    from speechtrain.config import read_yaml

    if not data:
        return [] if fmt == "auto" else [f"data.format={fmt}"]
    manifest = Path(data)
    listed = (read_yaml(recipe_path(recipe)).get("data") or {}).get("manifest")
    if listed and Path(listed).parts[:2] == ("data", "demo") and len(Path(listed).parts) > 2:
        sub = manifest.joinpath(*Path(listed).parts[2:])
        if sub.exists():
            manifest = sub
    out = [f"data.manifest={manifest}"]
    if fmt and fmt != "auto":
        out.append(f"data.format={fmt}")
    return out


def parse_overrides(text: str | None) -> list[str]:
    """``key=value`` overrides from a text box (one per line or space separated; # comments)."""
    out: list[str] = []
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        for tok in line.split():
            if "=" not in tok:
                raise UserError(f"override '{tok}' is not key=value (e.g. train.max_steps=100)")
            out.append(tok)
    return out


def load_config(
    recipe: str, overrides: list[str], allow_models: tuple[str, ...] = (), allow_code: tuple[str, ...] = ()
) -> Any:
    """The recipe's config with overrides, checked as ``speechtrain train --config`` checks it, and as the web UI
    checks what it may run (:func:`check_runnable`)."""
    from speechtrain.config import load_config as _load

    cfg = _load(recipe_path(recipe), overrides)
    check_runnable(cfg, allow_models, allow_code)
    return cfg


def load_run_config(
    run_dir: str | Path, overrides: list[str], allow_models: tuple[str, ...] = (), allow_code: tuple[str, ...] = ()
) -> Any:
    """A run's saved config with overrides (what ``speechtrain train --resume`` and the inference doors read),
    checked by :func:`check_runnable`."""
    from speechtrain.recipes.common import load_run_config as _load

    cfg = _load(run_dir, overrides)
    check_runnable(cfg, allow_models, allow_code)
    return cfg


def parse_allow_code(entries: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``speechtrain ui --allow-code KEY=MODULE:FUNCTION`` entries, checked: each names a config key that takes code
    (declared so in the schema) and a ``module:function``; a UserError naming the entry otherwise."""
    out = []
    for entry in entries:
        key, _, value = entry.partition("=")
        if not value or ":" not in value or not key.strip():
            raise UserError(
                f"--allow-code {entry}: give the key and the code as the config names them, "
                "KEY=MODULE:FUNCTION (e.g. model.text_front_end=speechtrain.data.text.amharic:g2p)"
            )
        out.append(f"{key.strip()}={value.strip()}")
    return tuple(out)


def check_runnable(cfg: Any, allow_models: tuple[str, ...] = (), allow_code: tuple[str, ...] = ()) -> None:
    """What the web UI refuses to run, whoever reaches the page: every config value that names code (the fields the
    schema declares with :data:`speechtrain.config.NAMES_CODE`: ``model.name=package.module:factory``,
    ``model.text_front_end=package.module:function`` ...) unless the person who started the UI named it
    (``speechtrain ui --allow-model M:F`` for ``model.name``, ``--allow-code KEY=M:F`` for any), and loading pickled
    objects (``train.init_trust_pickle``). Reading a config imports nothing, so this runs before any code of the
    config's could."""
    from speechtrain import registry
    from speechtrain.config import code_values

    allowed = {f"model.name={m}" for m in allow_models} | set(allow_code)
    for key, value in code_values(cfg):
        if f"{key}={value}" in allowed:
            continue
        if key == "model.name":
            listed = f"; allowed here: {', '.join(allow_models)}" if allow_models else ""
            raise UserError(
                f"model.name={value}: the web UI builds the registered families ({', '.join(registry.families())}) "
                f"and only the models of your own named when it was started (speechtrain ui --allow-model {value})"
                f"{listed}; it imports no other code"
            )
        listed = f"; allowed here: {', '.join(sorted(allowed))}" if allowed else ""
        raise UserError(
            f"{key}={value} names code to import (package.module:function): the web UI runs only the code its "
            f"operator named when starting it (speechtrain ui --allow-code {key}={value}){listed}; the command line "
            "runs it as given"
        )
    if getattr(cfg.train, "init_trust_pickle", False):
        raise UserError(
            "train.init_trust_pickle=true: loading pickled objects can run code, so the web UI never does; "
            "start that run from the command line (speechtrain train ... train.init_trust_pickle=true)"
        )


def config_value(cfg: Any, dotted: str) -> Any:
    """The value of ``section.key`` in a config (None when absent)."""
    obj = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# ------------------------------------------------------------------------------------------------ data
def make_demo_corpus(out: str | Path, utterances: int = 120) -> Path:
    """The synthetic demo corpus (``speechtrain make-dataset OUT --labelled``), made when missing."""
    from speechtrain.data.demo import make_demo_corpus as _make

    if utterances < 8:
        raise UserError(f"the demo corpus needs at least 8 utterances (some are held out), got {utterances}")
    out = Path(out)
    if (out / "metadata.csv").is_file():
        return out
    return Path(_make(out, utterances=utterances, seed=0, labelled=True))


def detect_format(path: str | Path) -> str:
    """The layout name of a dataset folder (any of :data:`FORMATS`; DataError naming what was looked for)."""
    from speechtrain.data.manifest import detect_format as _detect

    return _detect(path)


def prepare_argv(recipe: str, data: str, fmt: str, report_json: Path, extra: list[str]) -> list[str]:
    """``speechtrain prepare`` for the recipe's data settings (its count lines read in the job log)."""
    argv = ["prepare", "--config", str(recipe_path(recipe)), "--json", str(report_json)]
    return argv + data_overrides(recipe, data, fmt) + extra


@dataclass
class DataReport:
    """What the Data tab shows after prepare: the CLI's report plus per-utterance durations and symbols."""

    summary: str
    kept: int
    skipped: list[tuple[str, int, str]]  # reason, count, first ids
    durations: list[float]  # seconds, one per listed utterance that could be read
    symbols: list[tuple[str, int, bool]]  # symbol, count, known to the text front end
    unknown: list[str]
    report: dict[str, Any] = field(default_factory=dict)


def _summary_of(report: dict[str, Any]) -> str:
    d = report.get("duration_s") or {}
    lines = [
        f"data      {report.get('manifest')} ({report.get('format')})",
        f"kept      {report.get('kept')} of {report.get('listed')} listed utterances "
        f"({report.get('train')} train, {report.get('eval')} eval), {float(report.get('hours') or 0):.3f} h",
    ]
    if d:
        lines.append(
            f"duration  min {d['min']:.2f} s, median {d['median']:.2f} s, p95 {d['p95']:.2f} s, max {d['max']:.2f} s"
        )
    c = report.get("cache") or {}
    lines.append(
        f"cache     {report.get('cache_dir')}: reused {c.get('reused')}, computed {c.get('computed')} "
        f"({float(report.get('seconds') or 0):.1f} s)"
    )
    for name, d in (c.get("derived") or {}).items():  # a model family's derived features (XTTS: DVAE codes)
        lines.append(
            f"{name:<9} {d.get('description') or name}: reused {d.get('reused')}, computed {d.get('computed')}"
        )
    lines.append(f"skipped   {report.get('skipped_total', 0)}")
    return "\n".join(lines)


def data_report(report_json: str | Path) -> DataReport:
    """Read ``prepare --json`` and add the durations histogram data and the symbol inventory."""
    import json

    import soundfile as sf

    from speechtrain.data.manifest import read_manifest

    report = json.loads(Path(report_json).read_text())
    skipped = [
        (reason, len(ids), ", ".join(map(str, ids[:5]))) for reason, ids in (report.get("skipped") or {}).items()
    ]
    entries, _ = read_manifest(report["manifest"], report.get("format") or "auto")
    durations: list[float] = []
    for e in entries:
        try:
            durations.append(float(sf.info(e.audio_path).duration))
        except (RuntimeError, OSError, sf.LibsndfileError):
            continue  # prepare has already counted it as skipped
    text = report.get("text") or None
    if text:  # prepare's own text report: the run's symbols and what it could not map
        symbols = [(r["symbol"], int(r["count"]), True) for r in text.get("inventory", [])]
        symbols += [(u["char"], int(u["count"]), False) for u in text.get("unknown", [])]
        unknown = sorted({u["char"] for u in text.get("unknown", [])})
    else:
        symbols, unknown = symbol_inventory([e.text for e in entries])
    return DataReport(_summary_of(report), int(report.get("kept") or 0), skipped, durations, symbols, unknown, report)


def symbol_inventory(
    texts: list[str],
    symbols: list[str] | str | None = None,
    *,
    language: str = "und",
    lowercase: bool = True,
    strip_accents: bool = False,
) -> tuple[list[tuple[str, int, bool]], list[str]]:
    """Symbols the text front end makes of ``texts``, with counts and whether the symbol set has
    them (``symbols``: a list or ``ascii``; None: the set learned from these texts); the characters
    it cannot map, listed (never silently <unk>)."""
    from speechtrain.data.text import TextFrontEnd, TextSettings
    from speechtrain.data.text.tokenizer import symbols_of

    front_end = TextFrontEnd(TextSettings(language=language, lowercase=lowercase, strip_accents=strip_accents))
    counts: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    for t in texts:
        p = front_end.process(t or "")
        counts.update(p.symbols)
        dropped.update(p.unmapped)
    known = set(counts) if symbols is None else set(symbols_of(symbols))
    rows = [(sym, n, sym in known) for sym, n in counts.most_common()]
    rows += [(c, n, False) for c, n in dropped.most_common()]
    unknown = sorted({s for s, _, k in rows if not k})
    return rows, unknown


def histogram(values: list[float], bins: int = 20) -> tuple[float, list[tuple[float, int]]]:
    """``(width, [(bin centre in seconds, count), ...])`` of ``values``, centres ascending, bins of no value left
    out. The width is a round number (1, 2 or 5 times a power of ten) giving about ``bins`` bins, and the bins
    start at its multiples, as the page's plot bins its numeric axis (``x_bin``)."""
    if not values:
        return 1.0, []
    lo, hi = min(values), max(values)
    raw = (hi - lo) / bins or 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    width = min((m * power for m in (1.0, 2.0, 5.0, 10.0)), key=lambda w: abs(math.log(w / raw)))
    counts = Counter(math.floor(v / width + 1e-9) for v in values)
    return width, [(round((k + 0.5) * width, 6), n) for k, n in sorted(counts.items())]


# --------------------------------------------------------------------------------- probe, estimate, plan
@dataclass
class Switch:
    """One acceleration row of the Recipe tab: the probe's value and reason, the recipe's value."""

    key: str
    recommended: Any
    recipe: Any
    reason: str


def probe_switches(cfg: Any | None) -> tuple[str, list[Switch]]:
    """The probe's recommendations for this machine (computed, not a table written by hand)."""
    from speechtrain.accel.probe import probe_hardware, recommend

    info = probe_hardware(measure=False)
    where = info.gpu_name or info.cpu_name or "CPU"
    head = f"{info.device_type} ({where}), {info.cpu_cores} CPU cores, torch {info.torch_version}"
    rows = []
    for r in recommend(info):
        current = None if cfg is None or r.key.startswith("note.") else config_value(cfg, r.key)
        rows.append(Switch(r.key, _plain(r.value), _plain(current), r.reason))
    return head, rows


def _plain(value: Any) -> Any:
    if isinstance(value, bool):
        return str(value).lower()
    return getattr(value, "value", value) if value is not None else ""


def estimate_text(cfg: Any) -> str:
    """``speechtrain estimate`` (memory before any run) as text."""
    from speechtrain.memory.estimate import format_estimate
    from speechtrain.recipes.estimate import EstimateRecipe

    return format_estimate(EstimateRecipe(cfg).run())


def plan_text(cfg: Any) -> str:
    """``speechtrain plan`` (the epoch's batches and padding) as text; prepares the data when needed."""
    from speechtrain.recipes.data import DataRecipe

    if cfg.data.manifest is None:
        raise UserError("the plan needs data: choose a dataset folder (Data tab) or set data.manifest")
    recipe = DataRecipe(cfg)
    recipe.ensure_prepared()
    ds = recipe.dataset("train", fields=())
    report = recipe.plan(ds.frames, ids=list(ds.ids), hop_length=ds.hop_length, sample_rate=ds.sample_rate)
    return recipe.format_plan(report)


# ----------------------------------------------------------------------------------- train, tune, bench
def train_argv(recipe: str, overrides: list[str]) -> list[str]:
    return ["train", "--config", str(recipe_path(recipe)), *overrides]


def resume_argv(run_dir: str | Path, overrides: list[str]) -> list[str]:
    return ["train", "--resume", str(run_dir), *overrides]


def tune_argv(recipe: str, overrides: list[str], out_yaml: Path, report_json: Path) -> list[str]:
    return [
        "tune",
        "--config",
        str(recipe_path(recipe)),
        "--out",
        str(out_yaml),
        "--json",
        str(report_json),
        *overrides,
    ]


def bench_argv(
    recipe: str, overrides: list[str], folder: Path, steps: int, time_limit: float, skip: list[str] | None = None
) -> list[str]:
    skips = [a for rung in skip or [] for a in ("--skip", rung)]
    return [
        "bench",
        "--config",
        str(recipe_path(recipe)),
        "--ablate",
        "--steps",
        str(steps),
        "--time-limit",
        str(time_limit),
        "--json",
        str(folder / "bench.json"),
        "--markdown",
        str(folder / "bench.md"),
        "--plot",
        str(folder / "bench.png"),
        *skips,
        *overrides,
    ]


def bench_outputs(report_json: Path) -> tuple[str, str]:
    """The ladder's markdown table and diagnosis from ``bench --json``."""
    import json

    from speechtrain.bench.report import diagnosis_text, markdown_table

    report = json.loads(Path(report_json).read_text())
    return markdown_table(report), diagnosis_text(report)


def tune_table(report_json: Path) -> str:
    """The tuner's final per-bucket table text from ``tune --json``."""
    import json

    d = json.loads(Path(report_json).read_text())
    lines = ["bucket  items  longest  batch  padded  audio s/s  limited by"]
    for b in sorted(d["buckets"], key=lambda r: -r["max_item_frames"]):
        aps = b.get("audio_seconds_per_second")
        lines.append(
            f"{b['bucket']:>6} {b.get('items', 0):>6} {b['max_item_frames']:>8} {b['batch_size']:>6} "
            f"{b['batch_frames']:>7} {'-' if aps is None else f'{aps:.1f}':>10}  {b['limited_by']}"
        )
    lines.append(f"grad_accum {d.get('grad_accum')}; device {d.get('device')}; tuned in {d.get('seconds', 0):.1f} s")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- run files
def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every row of ``metrics.jsonl`` (train and eval); a half-written last line is ignored."""
    import json

    from speechtrain.train.rundir import RunDir

    path = RunDir(run_dir).metrics
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # the trainer is writing this line right now
    return rows


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    from speechtrain.train.rundir import RunDir

    return [step for step, _ in RunDir(run_dir).steps()]


def run_config(run_dir: str | Path) -> dict[str, Any]:
    """The run's saved config.yaml as a plain dict ({} when not written yet)."""
    from speechtrain.config import read_yaml
    from speechtrain.train.rundir import RunDir

    path = RunDir(run_dir).config
    try:
        return read_yaml(path) if path.is_file() else {}
    except UserError:
        return {}


def eval_samples(run_dir: str | Path) -> list[Path]:
    """Eval audio the trainer wrote (samples/step_*/ID.wav), newest step last."""
    from speechtrain.train.rundir import RunDir

    return RunDir(run_dir).eval_samples()


# ------------------------------------------------------------------------------------------- inference
@dataclass
class Inference:
    audio_path: Path
    seconds: float  # audio duration
    compute_seconds: float
    rtf: float
    note: str = ""


def _written(audio: Any, out: Path) -> Inference:
    audio.write(out)
    return Inference(out, audio.seconds, audio.compute_seconds, audio.rtf)


def synthesize(run_dir: str | Path, text: str, out: Path, seed: int | None = 0) -> Inference:
    """Text to a wav with a TTS run (``speechtrain synthesize``), timed: RTF = compute s / audio s."""
    from speechtrain.recipes.inference import InferenceRecipe

    if not (text or "").strip():
        raise UserError("give a sentence to speak")
    return _written(InferenceRecipe(run_dir, verb="synthesize").synthesize(text, seed=seed), out)


def vocode(run_dir: str | Path, audio_in: str | Path, out: Path) -> Inference:
    """A wav's own log-mel through a vocoder run (``speechtrain vocode --audio``: an NSF vocoder's f0 is
    measured from the wav), timed."""
    from speechtrain.recipes.inference import InferenceRecipe

    return _written(InferenceRecipe(run_dir, verb="vocode").vocode_audio(audio_in), out)


def classify(run_dir: str | Path, audio_in: str | Path) -> tuple[str, dict[str, float], float]:
    """Label and class probabilities of one file with a classifier run, and the seconds it took."""
    from speechtrain.recipes.inference import InferenceRecipe

    if not Path(audio_in).is_file():
        raise DataError(f"file not found: {audio_in}")
    result = InferenceRecipe(run_dir, verb="classify").classify(str(audio_in))
    return result.label, result.probabilities, result.compute_seconds


# ------------------------------------------------------------------------------------------------- GPU
_NVML: Any = None


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def gpu_stats() -> list[dict[str, float]] | None:
    """Utilisation %, memory GiB, temperature C and power W per GPU from NVML (None without one).

    pynvml (nvidia-ml-py, the ``gpu`` extra) is imported on first use only."""
    global _NVML
    if _NVML is None:
        from speechtrain.bench.nvml import _load_pynvml

        _NVML = _load_pynvml() or False
    if not _NVML:
        return None
    nv = _NVML
    out = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            util = nv.nvmlDeviceGetUtilizationRates(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            out.append(
                {
                    "gpu": i,
                    "util_pct": float(util.gpu),
                    "mem_gib": mem.used / 2**30,
                    "temp_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                    "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                }
            )
    except Exception:  # NVML's own error types; a GPU that went away reads as none
        return None
    return out
