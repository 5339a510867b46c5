"""The intelligibility judge of a corpus (:mod:`speechtrain.quality.judge`): read the corpus, key it by its content,
load the cached judge or train one on its recordings, and refuse it when its ceiling is above its bound."""

from __future__ import annotations

import os
from pathlib import Path

from speechtrain.data.audio import AudioProblem, load_audio, split_segment
from speechtrain.data.layouts.base import Entry
from speechtrain.data.manifest import read_manifest
from speechtrain.data.store import held_out_ids
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.judge import (
    JUDGE_RATE,
    Judge,
    JudgeSettings,
    JudgeStore,
    Recording,
    corpus_key,
    train_judge,
)

log = get_logger(__name__)

#: the recipe of the judge's settings (recipes/asr_ctc_tiny.yaml)
JUDGE_RECIPE = "asr_ctc_tiny"


def judge_settings(recipe: str | os.PathLike[str] | None = None, **overrides: float) -> JudgeSettings:
    """The judge's settings: the ``judge:`` section of ``recipe`` (default recipes/asr_ctc_tiny.yaml; the code's
    defaults when that file is not there, as in an installed package), then ``overrides``."""
    import yaml

    from speechtrain.recipes.common import find_recipe

    try:
        path = find_recipe(str(recipe or JUDGE_RECIPE))
    except UserError:
        if recipe is not None:
            raise
        return JudgeSettings.from_mapping(dict(overrides), "judge settings")
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: not a readable YAML file ({exc})") from None
    section = loaded.get("judge") if isinstance(loaded, dict) else None
    if not isinstance(section, dict):
        raise UserError(f"{path}: a judge recipe holds a 'judge:' section of settings")
    return JudgeSettings.from_mapping({**section, **overrides}, str(path))


def corpus_judge(
    manifest: str | os.PathLike[str],
    fmt: str = "auto",
    settings: JudgeSettings | None = None,
    store: JudgeStore | None = None,
    language: str | None = None,
    eval_utterances: int = 0,
) -> Judge:
    """The judge of the corpus at ``manifest`` (its ``data.format``): loaded from ``store`` when a judge of the
    same settings and content is cached, else trained on its recordings and cached; ``language``: the corpus's
    (``data.language``), whose case folding the judge's texts take; ``eval_utterances``: the run's held-out count
    (``data.eval_utterances``), whose items (the same rule, :func:`speechtrain.data.store.held_out_ids`) the judge
    never trains on, so that it has not heard the sentences of the syntheses it scores. A UserError with the reason
    when its held-out CER (the ceiling) is above its bound."""
    s, store = settings or judge_settings(), store or JudgeStore()
    entries, _problems = read_manifest(manifest, fmt)
    entries = [e for e in entries if e.text.strip()]
    withhold = held_out_ids([e.id for e in entries], eval_utterances) if eval_utterances > 0 else set()
    key = corpus_key(s, _content(entries), language, withhold)
    judge = store.load(key)
    if judge is None:
        judge = train_judge(_recordings(entries), s, key, language, withhold)
        store.save(judge)
    else:
        log.info(judge.report.line())
    why = judge.report.refusal(str(manifest))
    if why is not None:
        raise UserError(why)
    return judge


def _content(entries: list[Entry]) -> list[tuple[str, str, bytes]]:
    """(id and audio path, text, the audio file's bytes) of each entry: what the cache key is made of."""
    files: dict[str, bytes] = {}
    out = []
    for e in entries:
        file = split_segment(e.audio_path)[0]
        if file not in files:
            try:
                files[file] = Path(file).read_bytes()
            except OSError as exc:
                raise UserError(f"{e.where or file}: audio not readable ({exc.strerror})") from None
        out.append((f"{e.id}|{Path(e.audio_path).name}", e.text, files[file]))
    return out


def _recordings(entries: list[Entry]) -> list[Recording]:
    """The corpus's recordings at the judge's rate; an unreadable one is skipped and counted in the log."""
    out, skipped = [], 0
    for e in entries:
        try:
            audio, _info = load_audio(e.audio_path, JUDGE_RATE)
        except AudioProblem:
            skipped += 1
            continue
        out.append(Recording(e.id, audio, JUDGE_RATE, e.text))
    if skipped:
        log.warning(f"judge: {skipped} recordings skipped (unreadable audio)")
    return out
