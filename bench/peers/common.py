"""What every peer definition shares: its record (:class:`PeerDefinition`) and the raw config of speechtrain's two
rows (:func:`recipe_raw`). Runs in speechtrain's environment (the orchestrator), not in the peers'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass
class PeerDefinition:
    """One peer: how to prepare its corpus and model, the settings of its own row and of ours."""

    key: str
    title: str
    peer_label: str
    runner: str  # the script in bench/peers/ that trains the peer's own code (run in the peers' environment)
    recipe: str  # speechtrain's recipe for the same model
    prepare: Callable[..., dict[str, Any]]  # (work folder, PeerOptions) -> context (corpus, checkpoint ...)
    peer_raw: Callable[[dict[str, Any]], dict[str, Any]]
    ours_raw: Callable[[dict[str, Any], bool, dict[str, Any]], dict[str, Any]]
    loss_keys: dict[str, str]
    settings: str
    shims: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    needs: Callable[[], str | None] = lambda: None  # why the peer cannot run here (None: it can)
    quality: QualityPlan | None = None  # the quality after equal audio (None: not scored, ``quality_note`` says why)
    quality_note: str = ""
    #: the peer row's raw config trained with another seed (pass r of the ladder: the base seed + r)
    seeded: Callable[[dict[str, Any], int], dict[str, Any]] = lambda raw, seed: {**raw, "seed": seed}
    #: the :class:`PeerOptions` fields this peer takes besides its defaults (the runner refuses the others)
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class PeerOptions:
    """What the bench's command line may change in a peer's comparison (both sides alike).

    ``language``: the corpus is sentences of this language spoken by espeak-ng (``speechtrain make-dataset OUT
    --language LANG -n N``'s corpus) instead of the English demo corpus; ``utterances``: how many (default: the
    peer's own count); ``size``: ``peer`` (the peer's own model size) or ``tiny`` (the tiny recipe's sizes where the
    peer's code lets them be set)."""

    language: str | None = None
    utterances: int | None = None
    size: str = "peer"

    def asked(self) -> list[str]:
        """The options set away from their defaults, by name."""
        out = []
        if self.language is not None:
            out.append("language")
        if self.utterances is not None:
            out.append("utterances")
        if self.size != "peer":
            out.append("size")
        return out


def speech_corpus(
    work: Path, options: PeerOptions, utterances: int, demo_folder: str = "corpus_demo"
) -> tuple[Path, str]:
    """The speech corpus of a comparison, written once into ``work``: the English demo corpus (synthetic voices),
    or with ``options.language`` espeak-ng's reading of that language's built-in sentences in two voices, as
    ``make-dataset --language`` writes it (22050 Hz, 16-bit PCM, LJSpeech layout). Returns (folder, words)."""
    n = options.utterances or utterances
    if options.language is None:
        from speechtrain.data.demo import make_demo_corpus

        corpus = work / (f"{demo_folder}_{n}" if options.utterances else demo_folder)
        if not (corpus / "metadata.csv").is_file():
            make_demo_corpus(corpus, utterances=n, seed=0)
        return corpus, f"{n} English demo utterances (speechtrain's synthetic corpus)"
    from speechtrain.data.speak import corpus_sentences, make_language_corpus

    lang = options.language
    corpus = work / f"corpus_espeak_{lang.replace('-', '_')}_{n}"
    if not (corpus / "metadata.csv").is_file():
        make_language_corpus(corpus, lang, corpus_sentences(lang, n, 0), seed=0, voices=("", "+f3"))
    return corpus, (
        f"{n} utterances of {lang!r} spoken by espeak-ng in two voices (`speechtrain make-dataset OUT --language "
        f"{lang} -n {n}`)"
    )


#: the seed of pass 0 on every row (pass r: SEED + r), speechtrain's default train.seed
SEED = 1234


@dataclass(frozen=True)
class QualityPlan:
    """How a peer's rows are scored: ``items`` held-out utterances (by speechtrain's own held-out rule, so that our
    rows' eval split is the same items), each row's audio for them (``what``), the metrics of ``kind`` shown."""

    kind: str  # "vocoder" (against the recording: PESQ, STOI, MCD) or "tts" (DNSMOS, MCD-DTW)
    metrics: tuple[str, ...]  # shown; the first in the main table
    what: str
    items: int = 4


def git_tree(src: Path, work: Path, prefix: str) -> Path:
    """A peer's tree at HEAD, read out of ``src`` (a clone or a bare git dir) into ``work/<prefix>-<commit>``
    (once: an earlier copy of the same commit is kept)."""
    import subprocess

    git = ["git", "-C", str(src)] if (src / ".git").exists() else ["git", f"--git-dir={src}"]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    out = work / f"{prefix}-{commit[:12]}"
    if not out.is_dir() or not any(out.iterdir()):
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run([*git, "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def source_dir(env: str) -> Path | None:
    """The folder of a peer's code that environment variable ``env`` names (set from the peer's command-line flag:
    a clone or a git dir), or None."""
    import os

    value = os.environ.get(env)
    return Path(value) if value else None


def missing_source(env: str, flag: str, unset: str) -> str | None:
    """Why a peer whose code is read from a checkout cannot run here (None: it can): ``unset`` when ``env`` names
    nothing, "FLAG PATH: no such folder" when it names a missing one."""
    src = source_dir(env)
    if src is None:
        return unset
    if not src.exists():
        return f"{flag} {src}: no such folder"
    return None


def corpus_ids(corpus: str | Path) -> list[tuple[str, str]]:
    """(id, text) of an LJSpeech-layout corpus's metadata.csv, in its order."""
    rows = []
    for line in (Path(corpus) / "metadata.csv").read_text(encoding="utf-8").splitlines():
        if line.strip():
            parts = line.split("|")
            rows.append((parts[0], parts[-1]))
    return rows


def held_out(corpus: str | Path, n: int) -> list[str]:
    """The ``n`` ids speechtrain holds out of ``corpus`` with ``data.eval_utterances: n`` (its one rule,
    :func:`speechtrain.data.store.held_out_ids`), in the corpus's order: no row trains on them."""
    from speechtrain.data.store import held_out_ids

    ids = [i for i, _ in corpus_ids(corpus)]
    chosen = held_out_ids(ids, n)
    return [i for i in ids if i in chosen]


def recipe_raw(
    recipe: str, overrides: dict[str, Any], autopilot: bool, recommendation: dict[str, Any]
) -> dict[str, Any]:
    """speechtrain's raw config for a peer comparison: ``recipe`` with ``overrides``; at the peer's settings
    everything speechtrain would switch on is off (the ladder's all-off row: fp32, fixed-count batches, no
    workers, plain AdamW kernel); with ``autopilot`` the recipe's own batching plus the hardware recommendation
    (the ladder's "all" row without the tuner)."""
    import torch

    from speechtrain.bench.ablate import COMMON, all_off, set_dotted
    from speechtrain.config import load_config

    cfg = load_config(REPO / recipe)
    raw = cfg.to_dict()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if autopilot:
        base = {**COMMON, **{k: v for k, v in recommendation.items() if k.startswith(("accel.", "optim.", "data."))}}
        base["data.bucketing"] = True
    else:
        base = all_off(device)
    for key, value in {**base, **overrides}.items():
        set_dotted(raw, key, value)
    return raw
