"""The intelligibility judge: a small CTC recogniser over characters that speechtrain trains on a corpus's own
training recordings, so that ``cer`` can be scored in any language a corpus is in (no ASR weights ship with
speechtrain, and an off-the-shelf English model reads espeak-ng's own recordings at CER 0.6-0.7).

Its character error rate on recordings held out of its training is its **ceiling**: the best a synthesis of that
corpus can read. A judge whose ceiling is above its bound (:attr:`JudgeSettings.bound`, 10 %) cannot tell an
intelligible voice from an unintelligible one and is refused with the reason (:meth:`JudgeReport.refusal`).

The model: two 1-D convolutions over a log-mel at 16 kHz (the second halves the frame rate to 20 ms), two
bidirectional GRU layers and a linear layer to the corpus's characters plus the CTC blank; about 1.1 M parameters at
the defaults (``recipes/asr_ctc_tiny.yaml``). Its features are its own (fixed STFT and mel settings, not the run's),
so that a cached judge reads audio the same way whichever run calls it. Texts are compared after
:func:`speechtrain.quality.metrics.normalise_text`, the one CER normalisation.

Why not a registered family trained by the Trainer: a family must pass every door of the test matrix (export,
distributed strategies, resume, the UI), a cost out of proportion with a recogniser that exists only to score other
models; it trains here in a plain loop of a few minutes on the CPU, one thread by default.

:class:`JudgeStore` owns the cache folder (one folder per key: the settings and the corpus's content), so a second
run on the same corpus loads the judge instead of training it; its weights are read through
:func:`speechtrain.ckptio.load` (tensors only).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.metrics import cer, fold_language, normalise_text, resample

log = get_logger(__name__)

#: the judge hears 16 kHz audio (speech recognisers' rate; every corpus is resampled to it with soxr)
JUDGE_RATE = 16000
#: the name that selects the judge in ``train.quality_asr`` and ``speechtrain eval --asr`` (else a folder)
JUDGE = "judge"
#: recipe files that hold a judge's settings, not a training config (the UI's recipe list leaves them out)
JUDGE_RECIPES = ("asr_ctc_tiny",)
#: bump when the model, the features or the training change: cached judges of another version are not reused
JUDGE_VERSION = 1


@dataclass(frozen=True)
class JudgeSettings:
    """What the judge is and how it trains (``recipes/asr_ctc_tiny.yaml`` holds the defaults)."""

    n_mels: int = 64  # log-mel bands of the judge's own features
    n_fft: int = 400  # 25 ms windows at 16 kHz
    hop_length: int = 160  # 10 ms; the second convolution halves the rate to 20 ms
    channels: int = 192  # convolution channels
    hidden: int = 160  # GRU units per direction
    layers: int = 2  # bidirectional GRU layers
    batch_size: int = 16
    lr: float = 2e-3
    max_epochs: int = 80
    max_seconds: float = 600.0  # training stops here (wall time) whatever the CER
    stop_cer: float = 0.02  # and earlier once the held-out CER is this low
    eval_every: int = 5  # epochs between held-out checks
    held_out: int = 50  # recordings held out (at most a tenth of the corpus, at least one)
    bound: float = 0.10  # a judge whose held-out CER is above this is refused
    threads: int = 1  # torch threads while training and reading (a shared CPU)
    seed: int = 0

    @classmethod
    def from_mapping(cls, values: dict[str, Any], where: str) -> JudgeSettings:
        """Settings from a mapping (a recipe file's ``judge:`` section); an unknown key is a UserError naming it."""
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UserError(f"{where}: unknown judge key {unknown[0]!r} (known: {', '.join(known)})")
        out: dict[str, Any] = {}
        for name, value in values.items():
            kind = float if known[name] == "float" else int
            try:
                out[name] = kind(value)
            except (TypeError, ValueError):
                raise UserError(f"{where}: judge.{name}={value!r} is not a number") from None
        return cls(**out)


# ------------------------------------------------------------------------------------ features and model
def _mel_filters(s: JudgeSettings) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular HTK-scale filters from 0 Hz to 8 kHz."""
    mel = lambda hz: 2595.0 * np.log10(1.0 + hz / 700.0)  # noqa: E731
    edges = 700.0 * (10 ** (np.linspace(0.0, mel(JUDGE_RATE / 2), s.n_mels + 2) / 2595.0) - 1.0)
    bins = np.linspace(0.0, JUDGE_RATE / 2, s.n_fft // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0.0, np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid))).astype(np.float32)


def features(audio: np.ndarray, rate: int, s: JudgeSettings) -> np.ndarray:
    """The judge's input: natural-log mel (T_frames, n_mels) of ``audio`` resampled to 16 kHz, each band
    normalised over the utterance (mean 0; a gain or a microphone's tilt does not change what is read)."""
    x = resample(np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0), int(rate), JUDGE_RATE)
    if len(x) < s.n_fft:
        x = np.pad(x, (0, s.n_fft - len(x)))
    frames = 1 + (len(x) - s.n_fft) // s.hop_length
    idx = np.arange(s.n_fft)[None, :] + s.hop_length * np.arange(frames)[:, None]
    power = np.abs(np.fft.rfft(x[idx] * np.hanning(s.n_fft).astype(np.float32), axis=-1)) ** 2
    logmel = np.log(np.maximum(power @ _mel_filters(s).T, 1e-8))  # (T_frames, n_mels)
    return (logmel - logmel.mean(0, keepdims=True)).astype(np.float32)


def _net(s: JudgeSettings, vocab: int) -> Any:
    """conv -> conv (stride 2) -> 2 x BiGRU -> linear to ``vocab`` + 1 (index 0: the CTC blank)."""
    import torch
    from torch import nn

    class CtcJudgeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv1d(s.n_mels, s.channels, 5, padding=2),
                nn.GELU(),
                nn.Conv1d(s.channels, s.channels, 5, stride=2, padding=2),
                nn.GELU(),
            )
            self.rnn = nn.GRU(
                s.channels,
                s.hidden,
                s.layers,
                batch_first=True,
                bidirectional=True,
                dropout=0.1 if s.layers > 1 else 0.0,
            )
            self.out = nn.Linear(2 * s.hidden, vocab + 1)

        def forward(self, mel: torch.Tensor) -> torch.Tensor:  # (B, T_frames, n_mels) -> (B, T_frames / 2, V + 1)
            h = self.conv(mel.transpose(1, 2)).transpose(1, 2)
            return self.out(self.rnn(h)[0]).log_softmax(-1)

    return CtcJudgeNet()


def _out_frames(frames: int) -> int:
    """Output steps of the net for ``frames`` input frames (the stride-2 convolution, padding 2, kernel 5)."""
    return (frames - 1) // 2 + 1


# ------------------------------------------------------------------------------------ the judge
@dataclass
class JudgeReport:
    """How the judge was made and what it reads: ``ceiling`` its CER on ``held_out`` recordings it never trained
    on, against ``bound``; ``texts_seen``: how many of those recordings' texts it heard in training (a corpus of a
    dozen sentences read many times gives all of them: the judge then knows its sentences)."""

    ceiling: float
    bound: float
    train_items: int
    held_out: int
    texts_seen: int
    epochs: int
    seconds: float
    parameters: int
    key: str = ""
    cached: bool = False
    #: recordings kept out of its training besides ``held_out``: the evaluation items of the run it scores for
    withheld: int = 0

    @property
    def accepted(self) -> bool:
        return math.isfinite(self.ceiling) and self.ceiling <= self.bound

    def refusal(self, corpus: str) -> str | None:
        """Why this judge may not score (None: it may)."""
        if self.accepted:
            return None
        return (
            f"the intelligibility judge trained on {corpus} reads its own held-out recordings at CER "
            f"{self.ceiling:.3f}, above its bound {self.bound:.2f} ({self.train_items} training recordings, "
            f"{self.epochs} epochs, {self.seconds:.0f} s): it cannot tell an intelligible voice from noise. Give it "
            "more recordings or time (recipes/asr_ctc_tiny.yaml: max_seconds, max_epochs), or name your own ASR "
            "model folder instead"
        )

    def line(self) -> str:
        """One line for the log."""
        where = "loaded from the cache" if self.cached else f"trained {self.epochs} epochs in {self.seconds:.0f} s"
        return (
            f"judge: CER {self.ceiling:.3f} on {self.held_out} held-out recordings ({self.texts_seen} of their texts "
            f"heard in training; bound {self.bound:.2f}), {self.parameters / 1e6:.2f} M parameters, "
            f"{self.train_items} training recordings"
            + (f" ({self.withheld} more withheld: the run's evaluation items)" if self.withheld else "")
            + f", {where}"
        )


@dataclass
class Judge:
    """A trained judge: transcribes 1-D audio (any rate) into the corpus's characters (greedy CTC decoding)."""

    net: Any
    alphabet: str
    settings: JudgeSettings
    report: JudgeReport
    language: str | None = field(default=None)

    def __call__(self, audio: np.ndarray, rate: int) -> str:
        import torch

        mel = torch.from_numpy(features(audio, rate, self.settings))[None]
        with torch.no_grad():
            ids = self.net.eval()(mel)[0].argmax(-1).tolist()
        return _collapse(ids, self.alphabet)

    def read(self, items: Sequence[tuple[np.ndarray, str]]) -> float:
        """Mean CER of (feature, normalised text) pairs (``cer`` per item, NaN items left out)."""
        import torch

        values = []
        with torch.no_grad():
            for mel, text in items:
                ids = self.net.eval()(torch.from_numpy(mel)[None])[0].argmax(-1).tolist()
                values.append(cer(text, _collapse(ids, self.alphabet), self.language or "und"))
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else math.nan


def _collapse(ids: Iterable[int], alphabet: str) -> str:
    """Greedy CTC: repeats merged, blanks (0) dropped."""
    out, prev = [], 0
    for i in ids:
        if i != prev and i != 0:
            out.append(alphabet[i - 1])
        prev = i
    return "".join(out)


# ------------------------------------------------------------------------------------ training
@dataclass(frozen=True)
class Recording:
    """One corpus recording as the judge trains on it."""

    item_id: str
    audio: np.ndarray
    rate: int
    text: str


def train_judge(
    recordings: Sequence[Recording],
    s: JudgeSettings,
    key: str = "",
    language: str | None = None,
    withhold: Collection[str] = (),
) -> Judge:
    """A judge trained on ``recordings`` minus a held-out share (a fixed draw of ``s.seed``), its ceiling the CER on
    those; stops at ``s.max_epochs``, ``s.max_seconds`` or a held-out CER of ``s.stop_cer``, keeping the best
    weights by held-out CER. A UserError when fewer than 10 recordings have text. Texts are casefolded as
    ``language`` folds them (:func:`~speechtrain.quality.metrics.fold_language`: an English and an unset corpus
    share one cached judge), as the CER it is scored with folds the reference.
    ``withhold``: ids it never trains on (the run's evaluation items: the judge then reads every synthesis it scores
    without having heard that sentence's recording)."""
    import torch

    lang = fold_language(language)
    usable = [r for r in recordings if normalise_text(r.text, lang)]
    if len(usable) < 10:
        raise UserError(f"the judge needs at least 10 recordings with text to train on, the corpus has {len(usable)}")
    order = np.random.default_rng(s.seed).permutation(len(usable))
    n_held = max(1, min(s.held_out, len(usable) // 10))
    held = [usable[i] for i in order[:n_held]]
    rest = [usable[i] for i in order[n_held:]]
    train = [r for r in rest if r.item_id not in withhold]
    alphabet = "".join(sorted({ch for r in usable for ch in normalise_text(r.text, lang)}))
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, s.threads))
    try:
        torch.manual_seed(s.seed)
        net = _net(s, len(alphabet))
        report = JudgeReport(math.nan, s.bound, len(train), n_held, 0, 0, 0.0, 0, key, withheld=len(rest) - len(train))
        judge = Judge(net, alphabet, s, report, lang)
        seen = {normalise_text(r.text, lang) for r in train}
        judge.report.texts_seen = sum(normalise_text(r.text, lang) in seen for r in held)
        judge.report.parameters = sum(p.numel() for p in net.parameters())
        _fit(
            judge,
            _encoded(train, s, alphabet, lang),
            [(features(r.audio, r.rate, s), normalise_text(r.text, lang)) for r in held],
        )
    finally:
        torch.set_num_threads(threads)
    log.info(judge.report.line())
    return judge


def _encoded(
    recs: Sequence[Recording], s: JudgeSettings, alphabet: str, language: str = "und"
) -> list[tuple[np.ndarray, list[int]]]:
    """(features, label ids) of each recording whose label fits its frames (CTC needs one step per label and
    one between repeats)."""
    index = {ch: i + 1 for i, ch in enumerate(alphabet)}
    out = []
    for r in recs:
        mel, text = features(r.audio, r.rate, s), normalise_text(r.text, language)
        labels = [index[ch] for ch in text]
        if _out_frames(len(mel)) >= len(labels) + sum(a == b for a, b in zip(labels, labels[1:], strict=False)):
            out.append((mel, labels))
    return out


def _fit(judge: Judge, train: list[tuple[np.ndarray, list[int]]], held: list[tuple[np.ndarray, str]]) -> None:
    """The training loop: Adam, CTC loss, batches of similar length, the best held-out weights kept."""
    import torch

    s, net, report = judge.settings, judge.net, judge.report
    opt = torch.optim.AdamW(net.parameters(), lr=s.lr, weight_decay=1e-4)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    rng, t0 = np.random.default_rng(s.seed), time.perf_counter()
    best, best_state = math.inf, None
    for epoch in range(1, s.max_epochs + 1):
        net.train()
        for batch in _batches(train, s.batch_size, rng):
            mels, labels = zip(*batch, strict=True)
            x = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(m) for m in mels], batch_first=True)
            out = net(x).transpose(0, 1)  # (T_out, B, V + 1), as CTCLoss takes it
            loss = ctc(
                out,
                torch.tensor([i for lab in labels for i in lab]),
                torch.tensor([_out_frames(len(m)) for m in mels]),
                torch.tensor([len(lab) for lab in labels]),
            )
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            opt.step()
        elapsed = time.perf_counter() - t0
        last = epoch == s.max_epochs or elapsed >= s.max_seconds
        if epoch % s.eval_every == 0 or last:
            value = judge.read(held)
            log.info(f"judge epoch {epoch}: held-out CER {value:.3f} ({elapsed:.0f} s)")
            if value < best:
                best, best_state = value, {k: v.clone() for k, v in net.state_dict().items()}
            if best <= s.stop_cer or last:
                break
    if best_state is not None:
        net.load_state_dict(best_state)
    report.ceiling, report.epochs, report.seconds = best, epoch, time.perf_counter() - t0


def _batches(items: list[Any], size: int, rng: np.random.Generator) -> list[list[Any]]:
    """Shuffled batches of similar length (sorted within chunks of 8 batches: little padding, random order)."""
    order = rng.permutation(len(items))
    chunk = size * 8
    out: list[list[Any]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: len(items[i][0]))
        out += [[items[i] for i in part[j : j + size]] for j in range(0, len(part), size)]
    return [out[i] for i in rng.permutation(len(out))]


# ------------------------------------------------------------------------------------ the cache
def corpus_key(
    s: JudgeSettings,
    entries: Iterable[tuple[str, str, bytes]],
    language: str | None = None,
    withhold: Collection[str] = (),
) -> str:
    """The cache key of a judge: its version and settings (but the threads), and each recording's id, text and
    audio bytes (the corpus's content, not its path: a copy elsewhere reuses the judge, a changed file trains a new
    one)."""
    made = {k: v for k, v in asdict(s).items() if k != "threads"}  # the threads change the time, not the judge
    folds = fold_language(language)
    if folds != "und":  # a judge of Turkish texts reads other labels (an unset one: the old key)
        made["fold_language"] = folds
    if withhold:  # another set of training recordings: another judge
        made["withhold"] = sorted(withhold)
    h = hashlib.sha256(json.dumps({"version": JUDGE_VERSION, **made}, sort_keys=True).encode())
    for item_id, text, audio in entries:
        h.update(f"{item_id}\0{text}\0".encode())
        h.update(hashlib.sha256(audio).digest())
    return h.hexdigest()[:24]


class JudgeStore:
    """The judges' cache: ``ROOT/KEY/weights.pt`` (tensors) and ``ROOT/KEY/judge.json`` (alphabet, settings,
    report). ``root`` default: ``$SPEECHTRAIN_CACHE/judges`` or ``~/.cache/speechtrain/judges``."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        base = os.environ.get("SPEECHTRAIN_CACHE") or Path.home() / ".cache" / "speechtrain"
        self.root = Path(root) if root is not None else Path(base) / "judges"

    def folder(self, key: str) -> Path:
        return self.root / key

    def load(self, key: str) -> Judge | None:
        """The cached judge of ``key``, or None (none cached, or written by another version)."""
        from speechtrain import ckptio

        folder = self.folder(key)
        try:
            meta = json.loads((folder / "judge.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if meta.get("version") != JUDGE_VERSION:
            return None
        s = JudgeSettings(**meta["settings"])
        net = _net(s, len(meta["alphabet"]))
        net.load_state_dict(ckptio.load(folder / "weights.pt"))
        report = JudgeReport(**{**meta["report"], "cached": True})
        return Judge(net.eval(), meta["alphabet"], s, report, meta.get("language", "und"))

    def save(self, judge: Judge) -> Path:
        """Writes ``judge`` under its key (each file through :func:`speechtrain.paths.write_atomic`: a reader never
        sees half a judge, and two processes that trained the same judge at once, as the ranks of one run, each
        write whole files; a full disk is one error naming the file)."""
        import io

        import torch

        from speechtrain.paths import write_atomic

        folder = self.folder(judge.report.key)
        weights = io.BytesIO()
        torch.save(judge.net.state_dict(), weights)
        write_atomic(folder / "weights.pt", weights.getvalue())
        meta = {
            "version": JUDGE_VERSION,
            "alphabet": judge.alphabet,
            "language": judge.language or "und",
            "settings": asdict(judge.settings),
            "report": {k: v for k, v in asdict(judge.report).items() if k != "cached"},
        }
        write_atomic(folder / "judge.json", json.dumps(meta, indent=1))
        return folder
