"""``prepare``: validate the data, then compute features once into the cache (parallel, resumable).

1. Read the manifest(s) (``data.manifest``, and ``data.eval_manifest`` when set).
2. Validation pass (headers only; reused across runs for unchanged files); ``strict`` raises
   :class:`DataError` here, before any feature work, when anything was skipped.
3. Features for items whose cache files are missing: decode, downmix, resample to
   ``data.sample_rate``, trim to ``frames * hop_length`` samples, store the audio (int16) and its
   log-mel (float32) -- in ``workers`` spawned processes with a progress bar.
4. Write one index per manifest, delete feature files nothing refers to, return a
   :class:`PrepareReport`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.data import cache as C
from speechtrain.data.manifest import Problem, read_manifest
from speechtrain.data.text import Tokenizer
from speechtrain.data.validate import Checked, totals, validate_entries
from speechtrain.errors import DataError


@dataclass
class PrepareReport:
    """What ``prepare`` did: kept and skipped utterances (with reasons and ids), conversions, cache use."""

    manifest: str
    format: str
    cache_dir: str
    eval_manifest: str | None = None
    listed: int = 0
    kept: int = 0
    train: int = 0
    eval: int = 0
    problems: list[Problem] = field(default_factory=list)
    resampled: int = 0
    downmixed: int = 0
    empty_text_kept: int = 0
    hours: float = 0.0
    duration: dict[str, float] = field(default_factory=dict)
    reused: int = 0
    computed: int = 0
    removed_stale: int = 0
    workers: int = 1
    seconds: float = 0.0
    up_to_date: bool = False

    @property
    def skipped(self) -> dict[str, list[str]]:
        """reason -> ids (or ``file:line`` for lines without an id)."""
        out: dict[str, list[str]] = {}
        for p in self.problems:
            out.setdefault(p.reason, []).append(p.id if p.id is not None else p.where)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (``prepare --json``)."""
        return {
            "manifest": self.manifest,
            "format": self.format,
            "eval_manifest": self.eval_manifest,
            "cache_dir": self.cache_dir,
            "listed": self.listed,
            "kept": self.kept,
            "train": self.train,
            "eval": self.eval,
            "skipped_total": len(self.problems),
            "skipped_counts": totals(self.problems),
            "skipped": self.skipped,
            "problems": [p.to_dict() for p in self.problems],
            "resampled": self.resampled,
            "downmixed": self.downmixed,
            "empty_text_kept": self.empty_text_kept,
            "hours": self.hours,
            "duration_s": self.duration,
            "cache": {"reused": self.reused, "computed": self.computed, "removed_stale": self.removed_stale},
            "workers": self.workers,
            "seconds": self.seconds,
        }

    def summary(self, max_listed: int = 20) -> str:
        """A readable multi-line summary (what ``speechtrain prepare`` prints)."""
        d = self.duration
        lines = [
            f"data      {self.manifest} ({self.format})"
            + (f" + eval {self.eval_manifest}" if self.eval_manifest else ""),
            f"kept      {self.kept} of {self.listed} listed utterances ({self.train} train, {self.eval} eval), "
            f"{self.hours:.3f} h",
        ]
        if d:
            lines.append(
                f"duration  min {d['min']:.2f} s, median {d['median']:.2f} s, "
                f"p95 {d['p95']:.2f} s, max {d['max']:.2f} s"
            )
        lines.append(f"converted {self.resampled} resampled, {self.downmixed} downmixed to mono")
        if self.empty_text_kept:
            lines.append(f"note      {self.empty_text_kept} kept items have empty text (fine for vocoders/classifiers)")
        lines.append(
            f"cache     {self.cache_dir}: reused {self.reused}, computed {self.computed}"
            + (f", removed {self.removed_stale} stale files" if self.removed_stale else "")
            + f" ({self.workers} worker{'s' if self.workers != 1 else ''}, {self.seconds:.1f} s)"
        )
        if self.problems:
            counts = ", ".join(f"{r} {n}" for r, n in totals(self.problems).items())
            lines.append(f"skipped   {len(self.problems)}: {counts}")
            for p in self.problems[:max_listed]:
                lines.append(f"  - {p}")
            if len(self.problems) > max_listed:
                lines.append(f"  ... {len(self.problems) - max_listed} more (see --json)")
        else:
            lines.append("skipped   0")
        return "\n".join(lines)


def _effective_require_text(data_cfg: Any, require_text: bool | None) -> bool | None:
    return require_text if require_text is not None else data_cfg.require_text


def _data_cfg(cfg: Any) -> Any:
    return getattr(cfg, "data", cfg)


def is_prepared(cfg: Any, require_text: bool | None = None) -> str | None:
    """None when every manifest's cache is fresh, else why not (``missing``, ``stale (...)``)."""
    d = _data_cfg(cfg)
    rt = _effective_require_text(d, require_text)
    for _, manifest in C.manifests(d):
        fmt = C.resolve_format(manifest, d.format)
        reason = C.stale_reason(C.read_index(C.index_path(d, manifest)), d, manifest, fmt, rt)
        if reason is not None:
            return f"{manifest}: {reason}"
    return None


def ensure_prepared(
    cfg: Any, require_text: bool | None = None, workers: int | None = None, progress: bool = True
) -> PrepareReport | None:
    """Prepare only when the cache is missing or stale; returns the report, or None when it was fresh."""
    if is_prepared(cfg, require_text) is None:
        return None
    return prepare_dataset(cfg, workers=workers, progress=progress, require_text=require_text)


def prepare_dataset(
    cfg: Any,
    workers: int | None = None,
    strict: bool = False,
    progress: bool = True,
    require_text: bool | None = None,
) -> PrepareReport:
    """Validation pass + feature cache for ``cfg.data`` (a Config or a DataConfig); see the module doc.

    ``workers``: feature processes (None: up to 8, at most the CPU count; 1: in this process).
    ``strict``: any skipped item raises DataError (before feature work for validation problems).
    ``require_text``: True skips empty-text items; None: ``data.require_text``.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        raise DataError(
            "prepare was called while a worker process was starting: the script's top level runs again in each "
            'spawned worker; put it under `if __name__ == "__main__":`'
        )
    if workers is not None and workers < 1:
        raise DataError(f"workers must be >= 1, got {workers}")
    start = time.perf_counter()
    d = _data_cfg(cfg)
    rt = _effective_require_text(d, require_text)
    roles = C.manifests(d)
    root = C.cache_root(d)
    fsettings = C.feature_settings(d)
    tokenizer = Tokenizer(lowercase=d.lowercase)

    plans = []
    for role, manifest in roles:
        fmt = C.resolve_format(manifest, d.format)
        old = C.latest_index(d, manifest) or {}
        entries, problems = read_manifest(manifest, fmt)
        kept, vproblems, probes = validate_entries(entries, d, rt, old.get("probes"))
        plans.append([role, manifest, fmt, len(entries) + len(problems), kept, problems + vproblems, probes, old])

    all_problems = [p for plan in plans for p in plan[5]]
    if strict and all_problems:
        raise DataError(_strict_message(all_problems))

    report = PrepareReport(
        manifest=str(d.manifest), format=plans[0][2], cache_dir=str(root), eval_manifest=d.eval_manifest
    )
    with C.cache_lock(root):
        todo: dict[str, tuple[str, str]] = {}  # mel key -> (audio key, file)
        known: dict[str, list[int]] = {}
        kept_keys = set()
        for plan in plans:
            for item in plan[7].get("items", []):
                known[item["key"]] = [item["frames"], item["samples"]]
            for c in plan[4]:
                key, akey = C.feature_keys(c.entry.audio_path, c.sig, fsettings)
                kept_keys.add(key)
                if not (C.mel_path(root, key).is_file() and C.audio_path(root, akey).is_file()):
                    todo[key] = (akey, c.entry.audio_path)
        report.reused = len(kept_keys - set(todo))
        results, report.workers = _compute_all(todo, root, fsettings, workers, progress)
        report.computed = sum(1 for r in results.values() if r[2] is None)

        train_names: dict[str, list[str]] = {}
        seconds: list[float] = []
        for plan in plans:
            role, manifest, fmt, listed, kept, problems, probes, _ = plan
            index = _build_index(
                role, manifest, fmt, kept, problems, probes, d, fsettings, root, results, known, tokenizer, train_names
            )
            C.write_json_atomic(C.index_path(d, manifest), index)
            C.prune_variants(d, manifest)
            report.listed += listed
            report.problems.extend(C.problems_from_index(index))
            items = index["items"]
            report.kept += len(items)
            if role == "train":
                train_names = {"speakers": index["speakers"], "labels": index["labels"]}
                held = C.held_out_ids([it["id"] for it in items], 0 if d.eval_manifest else d.eval_utterances)
                report.eval += len(held)
                report.train += len(items) - len(held)
            else:
                report.eval += len(items)
            report.resampled += sum(1 for it in items if it["orig_sr"] != d.sample_rate)
            report.downmixed += sum(1 for it in items if it["channels"] > 1)
            report.empty_text_kept += sum(1 for it in items if not it["text"])
            seconds.extend(it["samples"] / d.sample_rate for it in items)
        report.removed_stale = C.collect_garbage(root)

    secs = np.asarray(seconds, dtype=np.float64)
    if secs.size:
        report.hours = float(secs.sum() / 3600)
        report.duration = {
            "min": float(secs.min()),
            "median": float(np.median(secs)),
            "p95": float(np.percentile(secs, 95)),
            "max": float(secs.max()),
        }
    report.seconds = time.perf_counter() - start
    if strict and report.problems:
        raise DataError(_strict_message(report.problems))
    return report


def _strict_message(problems: list[Problem], show: int = 10) -> str:
    counts = ", ".join(f"{r} {n}" for r, n in totals(problems).items())
    lines = [f"--strict: {len(problems)} problem(s) in the data ({counts}):"]
    lines += [f"  - {p}" for p in problems[:show]]
    if len(problems) > show:
        lines.append(f"  ... {len(problems) - show} more")
    lines.append("fix or remove these items, or run without --strict to skip them and get a report")
    return "\n".join(lines)


def _build_index(
    role: str,
    manifest: str,
    fmt: str,
    kept: list[Checked],
    problems: list[Problem],
    probes: dict[str, Any],
    d: Any,
    fsettings: dict[str, Any],
    root: Path,
    results: dict[str, tuple[int, int, tuple[str, str] | None]],
    known: dict[str, list[int]],
    tokenizer: Tokenizer,
    train_names: dict[str, list[str]],
) -> dict[str, Any]:
    items = []
    problems = list(problems)
    for c in kept:
        key, akey = C.feature_keys(c.entry.audio_path, c.sig, fsettings)
        if key in results:
            frames, samples, err = results[key]
            if err is not None:
                problems.append(Problem(err[0], f"{err[1]} ({c.entry.audio_path})", c.entry.id, c.entry.where))
                if err[0] != "feature_error":  # a property of the file: not retried until it changes
                    probes[c.entry.audio_path] = {"sig": c.sig, "problem": list(err)}
                continue
        elif key in known:
            frames, samples = known[key]
        else:  # cached by another manifest's run: read the shape from the file header
            frames = int(np.load(C.mel_path(root, key), mmap_mode="r").shape[1])
            samples = frames * d.hop_length
        e = c.entry
        items.append(
            {
                "id": e.id,
                "path": e.audio_path,
                "key": key,
                "audio_key": akey,
                "frames": frames,
                "samples": samples,
                "text": e.text,
                "tokens": tokenizer.encode(e.text) if e.text else [],
                "speaker": e.speaker,
                "label": e.label,
                "orig_sr": c.info.sample_rate,
                "channels": c.info.channels,
            }
        )
    speakers = sorted({it["speaker"] for it in items if it["speaker"] is not None})
    labels = sorted({it["label"] for it in items if it["label"] is not None})
    if role == "eval" and train_names:
        items, speakers, labels = _map_to_train(items, problems, train_names)
    return {
        "settings": C.index_settings(d),
        "role": role,
        "manifest": str(Path(manifest).absolute()),
        "format": fmt,
        "manifest_sig": C.manifest_signature(manifest, fmt),
        "speakers": speakers,
        "labels": labels,
        "items": items,
        "problems": [p.to_dict() for p in problems],
        "probes": probes,
    }


def _map_to_train(
    items: list[dict[str, Any]], problems: list[Problem], names: dict[str, list[str]]
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Eval items must use the training data's speaker/label ids; unknown names are skipped."""
    out = []
    for it in items:
        for field_name, pool in (("speaker", names["speakers"]), ("label", names["labels"])):
            if it[field_name] is not None and it[field_name] not in pool:
                problems.append(
                    Problem("unknown_label", f"{field_name} '{it[field_name]}' is not in the training data", it["id"])
                )
                break
        else:
            out.append(it)
    return out, names["speakers"], names["labels"]


# ---------------------------------------------------------------- feature workers


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)  # one process per core; torch threads would oversubscribe


def compute_features(audio_file: str, settings: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(mel float32 (n_mels, T_frames), audio int16 (T_frames * hop_length,))`` of one file.

    The log-mel is computed from the stored int16 audio, so on-device features of the cached audio
    equal the cached mel. Raises :class:`speechtrain.data.audio.AudioProblem`.
    """
    from speechtrain.data.audio import AudioProblem, load_audio

    wave, _ = load_audio(audio_file, settings["sample_rate"])
    hop = settings["hop_length"]
    frames = wave.shape[0] // hop
    if frames < 1:
        raise AudioProblem("too_short", f"{wave.shape[0]} samples, less than one hop ({hop})")
    pcm = np.round(np.clip(wave[: frames * hop], -1.0, 1.0) * 32767.0).astype(np.int16)
    return mel_of_pcm(pcm, settings), pcm


def mel_of_pcm(pcm: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """float32 (n_mels, T_frames) log-mel of int16 audio (T_frames * hop_length,)."""
    from types import SimpleNamespace

    from speechtrain.data.features import log_mel_numpy

    mel = log_mel_numpy(pcm.astype(np.float32) / 32767.0, SimpleNamespace(**settings))  # (n_mels, T_frames)
    return np.ascontiguousarray(mel, dtype=np.float32)


def _save_npy(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
    np.save(tmp, array)
    os.replace(tmp, path)


def _compute_one(task: tuple[str, str, str, str, dict[str, Any]]) -> tuple[str, int, int, tuple[str, str] | None]:
    """Worker entry: compute and store one item (the mel from already stored audio when there is
    some, e.g. after an n_mels change); any failure comes back as a problem, never raises."""
    key, akey, audio_file, root, settings = task
    from speechtrain.data.audio import AudioProblem

    try:
        audio_out = C.audio_path(Path(root), akey)
        if audio_out.is_file():
            pcm = np.load(audio_out)
            mel = mel_of_pcm(pcm, settings)
        else:
            mel, pcm = compute_features(audio_file, settings)
            _save_npy(audio_out, pcm)
        _save_npy(C.mel_path(Path(root), key), mel)  # written last: its presence marks the item complete
        return key, int(mel.shape[1]), int(pcm.shape[0]), None
    except AudioProblem as exc:
        return key, 0, 0, (exc.reason, exc.detail)
    except Exception as exc:
        return key, 0, 0, ("feature_error", f"{type(exc).__name__}: {exc}"[:300])


def default_workers(n_tasks: int) -> int:
    """Up to 8 processes, at most the CPU count; 1 (in this process) for fewer than 32 items, where
    starting processes (each imports torch) costs more than it saves."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n_tasks < 32:
        return 1
    return max(1, min(8, cpus, n_tasks // 8))


def _pool_context() -> Any:
    """fork on Linux (as torch's DataLoader does): workers start at once and do not re-run the user's
    script, which spawn and forkserver do when it lacks an ``if __name__ == "__main__":`` guard. The
    workers use one torch thread and no CUDA, which keeps fork safe. Elsewhere spawn: the workers are
    top-level functions with picklable arguments, so they work under any start method."""
    if sys.platform.startswith("linux"):
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _run_pool(tasks: list[Any], workers: int, results: dict[str, Any], bar: Any) -> None:
    """Compute ``tasks`` in worker processes; a worker that dies (killed, out of memory) turns its
    unfinished items into ``feature_error`` problems instead of hanging or crashing the run."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_init_worker)
    try:
        futures = {pool.submit(_compute_one, task): task[0] for task in tasks}
        for fut in as_completed(futures):
            try:
                key, frames, samples, err = fut.result()
            except BrokenProcessPool:
                died = ("feature_error", "worker process died (see its error above); run again")
                key, frames, samples, err = futures[fut], 0, 0, died
            results[key] = (frames, samples, err)
            bar.update()
    except BaseException:  # Ctrl-C: stop now; finished items are on disk and reused next time
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _compute_all(
    todo: dict[str, tuple[str, str]], root: Path, settings: dict[str, Any], workers: int | None, progress: bool
) -> tuple[dict[str, tuple[int, int, tuple[str, str] | None]], int]:
    from tqdm import tqdm

    n = len(todo)
    workers = default_workers(n) if workers is None else min(workers, max(1, n))
    tasks = [(key, akey, path, str(root), settings) for key, (akey, path) in todo.items()]
    results: dict[str, tuple[int, int, tuple[str, str] | None]] = {}
    if not tasks:
        return results, 0
    bar = tqdm(total=n, desc="features", unit="utt", disable=not progress, dynamic_ncols=True)
    try:
        if workers == 1:
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # as in the workers: per-item STFTs gain nothing from more threads
            try:
                for task in tasks:
                    key, frames, samples, err = _compute_one(task)
                    results[key] = (frames, samples, err)
                    bar.update()
            finally:
                torch.set_num_threads(threads)
        else:
            _run_pool(tasks, workers, results, bar)
    finally:
        bar.close()
    return results, workers
