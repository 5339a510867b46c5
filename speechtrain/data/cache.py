"""Feature cache layout, keys, staleness and the train/eval hold-out.

Layout under the cache root (``data.cache_dir``, default ``<data folder>/.speechtrain_cache``)::

    <root>/<manifest-stem>-<hash8>/index-<settings-hash8>.json
                                                 one per manifest and settings variant (up to 4 kept):
                                                 settings, items, problems, header probes
    <root>/features/<kk>/<mel_key>.mel.npy       float32 (n_mels, T_frames)
    <root>/features/<kk>/<audio_key>.audio.npy   int16 (T_frames * hop_length,)
    <root>/.lock                                 held while preparing

A mel key hashes the audio file's absolute path, size, mtime and the feature settings (sample_rate,
n_fft, win_length, hop_length, n_mels, fmin, fmax); an audio key the same file facts with sample_rate
and hop_length only. A changed file or setting gets new keys and is recomputed (a mel-only setting
from the stored audio) while everything else is reused; files no index refers to are removed.
Switching between settings (an 80-mel vocoder and a 64-mel classifier on the same data) keeps both.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from speechtrain.data.manifest import Problem, detect_format, manifest_file
from speechtrain.data.validate import file_signature
from speechtrain.errors import DataError

CACHE_VERSION = 2  # bump when the index or feature layout changes
FEATURE_KEYS = ("sample_rate", "n_fft", "win_length", "hop_length", "n_mels", "fmin", "fmax")
VALIDATION_KEYS = ("min_duration", "max_duration", "lowercase")


def feature_settings(data_cfg: Any) -> dict[str, Any]:
    """The settings that change the features (a change recomputes them)."""
    return {k: getattr(data_cfg, k) for k in FEATURE_KEYS}


def index_settings(data_cfg: Any) -> dict[str, Any]:
    """Everything an index depends on besides the files: features, duration limits, lowercase."""
    return {
        "version": CACHE_VERSION,
        **feature_settings(data_cfg),
        **{k: getattr(data_cfg, k) for k in VALIDATION_KEYS},
    }


def resolve_format(manifest: str, fmt: str) -> str:
    return detect_format(manifest) if fmt == "auto" else fmt


def data_folder(manifest: str, fmt: str) -> Path:
    """The folder the data lives in (the manifest folder for a file, the folder itself otherwise)."""
    p = Path(manifest).absolute()
    return p if p.is_dir() else p.parent


def cache_root(data_cfg: Any) -> Path:
    """``data.cache_dir`` or ``<folder of data.manifest>/.speechtrain_cache``."""
    if data_cfg.cache_dir:
        return Path(data_cfg.cache_dir).absolute()
    if not data_cfg.manifest:
        raise DataError("data.manifest is not set (speechtrain prepare DATA, or data.manifest=PATH)")
    return data_folder(data_cfg.manifest, data_cfg.format) / ".speechtrain_cache"


KEEP_VARIANTS = 4  # settings variants kept per manifest (e.g. 80-mel for a vocoder, 64-mel for a classifier)


def manifest_dir(data_cfg: Any, manifest: str) -> Path:
    """The cache folder of one manifest (holds one index per settings variant)."""
    resolved = str(Path(manifest).resolve())
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(resolved).name or "data")[:40]
    digest = hashlib.sha1(resolved.encode()).hexdigest()[:8]
    return cache_root(data_cfg) / f"{stem}-{digest}"


def index_path(data_cfg: Any, manifest: str) -> Path:
    """Where the index of ``manifest`` for the current settings lives. Each settings variant has its
    own index, so switching between configs does not rebuild (or delete) the other's features."""
    blob = json.dumps(index_settings(data_cfg), sort_keys=True)
    return manifest_dir(data_cfg, manifest) / f"index-{hashlib.sha1(blob.encode()).hexdigest()[:8]}.json"


def latest_index(data_cfg: Any, manifest: str) -> dict[str, Any] | None:
    """The index for the current settings, else the most recently written variant (for reuse/diffs)."""
    current = read_index(index_path(data_cfg, manifest))
    if current is not None:
        return current
    variants = sorted(manifest_dir(data_cfg, manifest).glob("index-*.json"), key=_mtime, reverse=True)
    for path in variants:
        index = read_index(path)
        if index is not None:
            return index
    return None


def prune_variants(data_cfg: Any, manifest: str, keep: int = KEEP_VARIANTS) -> None:
    """Drop the oldest settings variants of a manifest beyond ``keep`` (their features go in GC)."""
    variants = sorted(manifest_dir(data_cfg, manifest).glob("index-*.json"), key=_mtime, reverse=True)
    for path in variants[keep:]:
        with contextlib.suppress(OSError):
            path.unlink()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


AUDIO_KEYS = ("sample_rate", "hop_length")  # the stored audio depends only on these


def _digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:24]


def feature_keys(audio_path: str, sig: list[int] | None, settings: dict[str, Any]) -> tuple[str, str]:
    """``(mel_key, audio_key)`` of one file: the mel key hashes every feature setting, the audio key
    only ``sample_rate`` and ``hop_length``, so an n_mels/n_fft/fmax change reuses the stored audio."""
    mel = _digest([CACHE_VERSION, "mel", audio_path, sig, settings])
    audio = _digest([CACHE_VERSION, "audio", audio_path, sig, {k: settings[k] for k in AUDIO_KEYS}])
    return mel, audio


def mel_path(root: Path, key: str) -> Path:
    """float32 (n_mels, T_frames) log-mel of a mel key."""
    return root / "features" / key[:2] / f"{key}.mel.npy"


def audio_path(root: Path, key: str) -> Path:
    """int16 (T_frames * hop_length,) audio of an audio key."""
    return root / "features" / key[:2] / f"{key}.audio.npy"


def manifest_signature(manifest: str, fmt: str) -> Any:
    """Changes when the listing changes: size+mtime of the manifest file, or the folder's file list."""
    src = manifest_file(manifest, fmt)
    if fmt != "folder":
        return file_signature(str(src))
    from speechtrain.data.manifest import _read_folder

    entries, problems = _read_folder(Path(src))
    listing = [e.audio_path for e in entries] + [p.where for p in problems]
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


def read_index(path: Path) -> dict[str, Any] | None:
    """The index at ``path``, or None when missing, unreadable or from another cache version."""
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or not isinstance(index.get("settings"), dict):
        return None
    if index["settings"].get("version") != CACHE_VERSION or not isinstance(index.get("items"), list):
        return None
    if not all(isinstance(it, dict) and _ITEM_KEYS <= it.keys() for it in index["items"]):
        return None  # damaged by hand: rebuilt like a missing one
    return index


_ITEM_KEYS = frozenset(("id", "path", "key", "audio_key", "frames", "samples", "text", "tokens", "speaker", "label"))


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, separators=(",", ":")))
    os.replace(tmp, path)


def stale_reason(
    index: dict[str, Any] | None, data_cfg: Any, manifest: str, fmt: str, require_text: bool | None
) -> str | None:
    """Why the index cannot be used as is (None: fresh)."""
    want = index_settings(data_cfg)
    if index is None:
        other = latest_index(data_cfg, manifest)
        if other is None:
            return "missing"
        have = other.get("settings", {})
        changed = [f"{k} {have.get(k)!r} -> {v!r}" for k, v in want.items() if have.get(k) != v]
        return "stale (settings changed: " + ", ".join(changed) + ")" if changed else "missing"
    if index.get("settings") != want:
        return "stale (settings changed)"
    if index.get("format") != fmt or index.get("manifest_sig") != manifest_signature(manifest, fmt):
        return "stale (the manifest changed)"
    changed_files = [p for p, rec in index.get("probes", {}).items() if file_signature(p) != rec.get("sig")]
    if changed_files:
        return f"stale ({len(changed_files)} audio file(s) changed, e.g. {changed_files[0]})"
    root = cache_root(data_cfg)
    for item in index.get("items", []):
        if not (mel_path(root, item["key"]).is_file() and audio_path(root, item["audio_key"]).is_file()):
            return f"incomplete (feature files of '{item['id']}' are missing)"
    if require_text is True and any(not item["text"] for item in index.get("items", [])):
        return "stale (it keeps items with empty text, and this task needs text)"
    if require_text is False and any(p["reason"] == "empty_text" for p in index.get("problems", [])):
        return "stale (it skipped empty-text items; data.require_text is now false)"
    return None


def manifests(data_cfg: Any) -> list[tuple[str, str]]:
    """``[(role, manifest)]``: ``train`` (data.manifest) and ``eval`` when data.eval_manifest is set."""
    if not data_cfg.manifest:
        raise DataError("data.manifest is not set (speechtrain prepare DATA, or data.manifest=PATH)")
    out = [("train", str(data_cfg.manifest))]
    if data_cfg.eval_manifest:
        out.append(("eval", str(data_cfg.eval_manifest)))
    return out


def held_out_ids(ids: list[str], eval_utterances: int) -> set[str]:
    """The ids held out for evaluation: the ``eval_utterances`` smallest by a stable hash of the id
    (independent of listing order). Capped at a fifth of the items (at least one when there are two
    or more) so that a small corpus keeps most of its items for training."""
    k = min(eval_utterances, max(1, len(ids) // 5) if len(ids) >= 2 else 0)
    ranked = sorted(ids, key=lambda i: hashlib.sha1(i.encode()).hexdigest())
    return set(ranked[:k])


@contextlib.contextmanager
def cache_lock(root: Path) -> Iterator[None]:
    """Exclusive lock on the cache root while preparing (no-op where fcntl is missing)."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def collect_garbage(root: Path) -> int:
    """Delete feature files that no index under ``root`` refers to; returns how many were removed."""
    keep: set[str] = set()
    for idx in root.glob("*/index-*.json"):
        index = read_index(idx)
        if index is not None:
            for item in index.get("items", []):
                keep.update((item["key"], item["audio_key"]))
    removed = 0
    for f in (root / "features").glob("*/*.npy"):
        if f.name.split(".", 1)[0] not in keep:
            with contextlib.suppress(OSError):
                f.unlink()
                removed += 1
    return removed


def problems_from_index(index: dict[str, Any]) -> list[Problem]:
    return [Problem(**p) for p in index.get("problems", [])]
