"""The peers' "quality after equal audio" column (bench/peers/run.py, speechtrain.bench.peers): the scoring of
every row's audio by one code on known pairs, the held-out items that no row trains on, the seed of each pass
(the same on every row), the report's column and verdict, and each row's audio writer (ours in every environment;
the peers' own in their venv, skipped where that venv or the peer's git dir is missing: neither is in the project's
files, so CI's fresh machine has none; `bench/peers/run.py --install` and a clone of the peer make them)."""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from speechtrain.bench.measure import RunSpec
from speechtrain.bench.peers import AUTO, PEER, SAME, build_peer_report, peers_markdown
from tests.peers import need
from tests.test_bench_peers import CPU, _peer

PEERS_DIR = Path(__file__).resolve().parents[1] / "bench" / "peers"
sys.path.insert(0, str(PEERS_DIR))
REPO = PEERS_DIR.parents[1]
PEER_HOME = Path(os.environ.get("SPEECHTRAIN_PEERS_HOME", Path.home() / ".cache" / "speechtrain-peers"))
MIRRORS = Path("/work/.mirror")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from speechtrain.data.demo import make_demo_corpus

    return make_demo_corpus(tmp_path_factory.mktemp("peers_quality") / "corpus", utterances=10, seed=0)


# -- scoring: every row's audio by one code --------------------------------------------------------------------


def _mel_fn() -> Any:
    from speechtrain.config import DataConfig
    from speechtrain.data.features import log_mel_numpy

    return functools.partial(log_mel_numpy, settings=DataConfig())


def test_scoring_a_rows_folder_on_known_pairs(corpus: Path, tmp_path: Path) -> None:
    """The recordings themselves score as perfect, a noisy copy of each worse on every metric, and an item whose
    file is missing or at another rate counts as no value (never silently left out)."""
    need("pesq", "quality")
    need("pystoi", "quality")
    import soundfile as sf

    from speechtrain.bench.peers import read_wav, score_audio_folder

    ids = ["DM000-0001", "DM000-0002"]
    refs = {i: corpus / "wavs" / f"{i}.wav" for i in ids}
    same, noisy, broken = tmp_path / "same", tmp_path / "noisy", tmp_path / "broken"
    for folder in (same, noisy, broken):
        folder.mkdir()
    rng = np.random.default_rng(0)
    for i, path in refs.items():
        audio, rate = read_wav(path)
        shutil.copy(path, same / f"{i}.wav")
        noise = rng.standard_normal(audio.size).astype(np.float32)
        noise *= np.sqrt(np.mean(audio**2) / np.mean(noise**2) / 10.0)  # 10 dB SNR
        sf.write(str(noisy / f"{i}.wav"), audio + noise, rate, subtype="FLOAT")
    sf.write(str(broken / f"{ids[0]}.wav"), read_wav(refs[ids[0]])[0], 16000)  # another rate; the second missing

    perfect = score_audio_folder(same, refs, "vocoder", _mel_fn())
    worse = score_audio_folder(noisy, refs, "vocoder", _mel_fn())
    assert perfect.items == worse.items == 2 and not perfect.failed and not worse.failed
    assert perfect.scores["pesq"] > 4.4 and perfect.scores["stoi"] > 0.99 and perfect.scores["mcd"] < 1e-3
    assert worse.scores["pesq"] < perfect.scores["pesq"] - 1.0 and worse.scores["stoi"] < perfect.scores["stoi"]
    assert worse.scores["mcd"] > 2.0  # dB as papers report it (a perfect copy: 0)
    gone = score_audio_folder(broken, refs, "vocoder", _mel_fn())
    assert gone.items == 2 and gone.failed["mcd"] == 2 and "mcd" not in gone.scores


# -- the report: the column, its spread over the seeds, the verdict ----------------------------------------------


def _quality(scores: dict[str, list[float | None]]) -> Any:
    from speechtrain.bench.peers import PeerQuality

    q = PeerQuality("vocoder", ["a", "b"], ["mcd", "pesq"], [1234, 1235, 1236], "resynthesis of held-out recordings")
    for key, values in scores.items():
        q.scores[key] = [
            None if v is None else {"scores": {"mcd": v, "pesq": 4.5 - v / 100}, "failed": {}, "items": 2}
            for v in values
        ]
    return q


def test_the_quality_column_gives_the_spread_over_seeds_and_marks_a_row_beyond_the_peers() -> None:
    peer = _peer({PEER: [1.0, 1.0, 1.0], SAME: [1.2, 1.2, 1.2], AUTO: [1.3, 1.3, 1.3]})
    peer.quality = _quality({PEER: [70.0, 74.0, 72.0], SAME: [71.0, 75.0, 73.0], AUTO: [80.0, 81.0, None]})
    rep = build_peer_report([peer], dict(CPU))
    json.dumps(rep)
    q = rep["peers"][0]["quality"]
    assert q["seeds"] == [1234, 1235, 1236] and q["items"] == ["a", "b"]
    rows = q["rows"]
    assert rows[PEER]["metrics"]["mcd"] == {"median": 72.0, "low": 70.0, "high": 74.0, "passes": 3}
    assert rows[PEER]["verdict"] == "reference" and rows[SAME]["verdict"] == "within the peer's spread"
    assert rows[AUTO]["passes"] == 2 and rows[AUTO]["verdict"].startswith("**worse beyond the peer's spread** on mcd")
    assert "pesq" in rows[AUTO]["verdict"]  # 4.5 - mcd/100: worse on both
    text = peers_markdown(rep)
    assert "quality after equal audio: mcd dB (lower is better)" in text
    assert "| 72.000 (70.000-74.000) |" in text and "| 80.500 (80.000-81.000) |" in text
    assert "seeds 1234, 1235, 1236" in text and "2/3" in text
    better = _peer({PEER: [1.0, 1.0], SAME: [1.2, 1.2]})
    better.quality = _quality({PEER: [70.0, 74.0], SAME: [60.0, 61.0]})
    rows = build_peer_report([better], dict(CPU))["peers"][0]["quality"]["rows"]
    assert rows[SAME]["verdict"] == "better beyond the peer's spread on mcd, pesq"
    once = _peer({PEER: [1.0], SAME: [1.2]})
    once.quality = _quality({PEER: [70.0], SAME: [90.0]})
    rows = build_peer_report([once], dict(CPU))["peers"][0]["quality"]["rows"]
    assert rows[SAME]["verdict"] == "one pass: no spread to judge by"
    # a peer row that failed in every pass: nothing to judge against (the bench once called that "within")
    failed = _peer({PEER: [None, None], SAME: [1.2, 1.2]})
    failed.quality = _quality({PEER: [None, None], SAME: [60.0, 61.0]})
    rows = build_peer_report([failed], dict(CPU))["peers"][0]["quality"]["rows"]
    assert rows[PEER]["verdict"] == "no audio to score (the row failed)"
    assert rows[SAME]["verdict"] == "not judged: the peer row left no audio to compare with"


def test_a_peer_without_quality_says_why_in_its_table() -> None:
    peer_xtts = importlib.import_module("peer_xtts")
    peer = _peer({PEER: [1.0], SAME: [1.2]})
    peer.quality_note = peer_xtts.DEFINITION.quality_note
    rep = build_peer_report([peer], dict(CPU))
    assert rep["peers"][0]["quality"] == {"note": peer.quality_note}
    text = peers_markdown(rep)
    assert "| not scored |" in text and "quality after equal audio: not scored: both sides fine-tune" in text


# -- the held-out items: trained on by no row --------------------------------------------------------------------


def _ctx(corpus: Path, tmp_path: Path) -> dict[str, Any]:
    from common import held_out

    return {
        "corpus": str(corpus),
        "work": str(tmp_path),
        "source": str(tmp_path / "src"),
        "mas_source": str(tmp_path / "core.pyx"),
        "held_out": held_out(corpus, 4),
    }


def test_the_held_out_items_are_speechtraines_own_split_and_no_row_trains_on_them(corpus: Path, tmp_path: Path) -> None:
    """The bench holds out the items our eval split holds out (the one rule, at the same count), leaves them out of
    SingingVocoders' train index, of jik876's train file list and of Piper's training csv, and our rows train
    without them."""
    import peer_nsf
    import peer_vits
    from singing_nsf import split_index

    from speechtrain.config import build_config
    from speechtrain.recipes.data import DataRecipe

    ctx = _ctx(corpus, tmp_path)
    held = ctx["held_out"]
    ids = [p.stem for p in sorted((corpus / "wavs").glob("*.wav"))]
    assert len(held) == 2 and set(held) < set(ids)  # 10 items: capped at a fifth
    # ours: the eval split is exactly the held-out items, the training split the rest
    raw = peer_nsf.ours_raw(ctx, False, {})
    raw["data"].update(cache_dir=str(tmp_path / "cache"), f0_method="yin")  # the split does not depend on f0
    cfg = build_config(raw)
    assert cfg.data.eval_utterances == len(held)
    data = DataRecipe(cfg)
    data.ensure_prepared()
    fields = data.fields(_needs(cfg))
    assert sorted(data.dataset("eval", fields).ids) == sorted(held)
    assert not set(data.dataset("train", fields).ids) & set(held)
    # SingingVocoders: the held-out wavs go out of their train index (their valid index is unused)
    raw = peer_nsf.peer_raw(ctx)
    assert [Path(p).stem for p in raw["held_out"]] == held
    train, valid = split_index([str(tmp_path / f"{i}.npz") for i in ids], raw["held_out"])
    assert sorted(Path(t).stem for t in train) == sorted(set(ids) - set(held)) and len(valid) == len(held)
    # jik876/hifi-gan: the held-out wavs go out of their train file list (and to their resynthesis)
    import peer_hifigan
    from jik876_hifigan import train_files

    raw = peer_hifigan.peer_raw(ctx)
    assert [Path(p).stem for p in raw["held_out"]] == held
    files = train_files(corpus, raw["held_out"])
    assert sorted(Path(f).stem for f in files) == sorted(set(ids) - set(held)) and all(Path(f).is_file() for f in files)
    assert build_config(peer_hifigan.ours_raw(ctx, False, {})).data.eval_utterances == len(held)
    # Piper: the held-out sentences' texts go to its synthesis (its training csv: the next test)
    vits_raw = peer_vits.peer_raw(ctx)
    assert [h["id"] for h in vits_raw["held_out"]] == held and all(h["text"] for h in vits_raw["held_out"])
    assert build_config(peer_vits.ours_raw(ctx, True, {})).data.eval_utterances == len(held)


def _needs(cfg: Any) -> Any:
    from speechtrain.recipes.common import build_task

    return build_task(cfg).needs()


def test_piper_trains_from_a_csv_without_the_held_out_sentences(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import peer_vits

    mirror = _mirror("OHF-Voice/piper1-gpl")
    need("piper")
    monkeypatch.setattr(peer_vits, "make_demo_corpus", lambda *a, **k: None, raising=False)
    work = tmp_path / "work"
    (work / "corpus_en").mkdir(parents=True)
    shutil.copytree(corpus, work / "corpus_en", dirs_exist_ok=True)
    monkeypatch.setenv(peer_vits.ENV, str(mirror))
    ctx = peer_vits.prepare(work)
    held = ctx["held_out"]
    rows = [ln.split("|")[0] for ln in Path(ctx["train_csv"]).read_text().splitlines() if ln.strip()]
    assert held and not set(rows) & set(held) and len(rows) + len(held) == 10
    assert peer_vits.peer_raw(ctx)["train_csv"] == ctx["train_csv"]
    from common import PeerOptions

    tiny = peer_vits.prepare(work, PeerOptions(size="tiny"))  # the same corpus; the table says which model
    assert "tiny" in tiny["title"] and "tiny" not in ctx["title"] and "hidden 32" in tiny["settings"]
    assert "English demo utterances" in ctx["settings"]


# -- the seed of each pass ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["nsf", "vits", "hifigan"])
def test_each_pass_trains_every_row_with_its_own_seed(key: str, corpus: Path, tmp_path: Path) -> None:
    """Pass r: seed 1234 + r on the peer's row (its own seed setting) and on ours (train.seed), and each row's
    audio into its own folder of that pass; a peer without a quality plan (xtts) keeps its spec."""
    from run import pass_spec

    from speechtrain.config import build_config

    defn = importlib.import_module(f"peer_{key}").DEFINITION
    ctx = _ctx(corpus, tmp_path)
    peer = RunSpec(name="peer", raw=defn.peer_raw(ctx), kind="peer")
    same = RunSpec(name="same", raw=defn.ours_raw(ctx, False, {}))
    root = tmp_path / "quality"
    folders = set()
    for r in range(3):
        p, s = pass_spec(defn, peer, PEER, r, root), pass_spec(defn, same, SAME, r, root)
        seed = p.raw["config"]["seed"] if key in ("nsf", "hifigan") else p.raw["seed"]
        assert seed == build_config(s.raw).train.seed == 1234 + r
        folders |= {p.quality_dir, s.quality_dir}
    assert folders == {str(root / k / f"pass_{r}") for k in (PEER, SAME) for r in range(3)}
    assert same.raw["train"]["seed"] == 1234 and same.quality_dir is None  # the base spec is left as it was
    xtts = importlib.import_module("peer_xtts").DEFINITION
    base = RunSpec(name="peer", raw={"seed": 1}, kind="peer")
    assert pass_spec(xtts, base, PEER, 2, root) is base


# -- the rows' audio writers -------------------------------------------------------------------------------------


def test_our_row_writes_its_audio_for_the_held_out_items_after_its_steps(corpus: Path, tmp_path: Path) -> None:
    """Our row (the bench's fresh process, as the ladder runs it) trains its steps, then writes one wav per
    held-out item at the corpus's rate, about each recording's length (a vocoder's resynthesis)."""
    from common import held_out

    from speechtrain.bench.measure import run_spec
    from speechtrain.bench.peers import read_wav
    from speechtrain.config import load_config

    raw = load_config(REPO / "recipes" / "vocoder_hifigan_tiny.yaml").to_dict()
    raw["data"].update(manifest=str(corpus), cache_dir=str(tmp_path / "cache"), eval_utterances=2)
    raw["train"].update(device="cpu", progress=False, tensorboard=False)
    out = tmp_path / "audio"
    spec = RunSpec(name="ours", raw=raw, steps=1, warmup=0, threads=1, quality_dir=str(out))
    result = run_spec(spec, isolate=True)
    assert result.steps == 1
    held = held_out(corpus, 2)
    assert sorted(p.stem for p in out.glob("*.wav")) == sorted(held)
    for i in held:
        audio, rate = read_wav(out / f"{i}.wav")
        ref, ref_rate = read_wav(corpus / "wavs" / f"{i}.wav")
        assert rate == ref_rate and abs(audio.size - ref.size) <= 256 and np.isfinite(audio).all()


def _peer_python() -> Path:
    py = PEER_HOME / "venv" / "bin" / "python"
    if not py.is_file():
        pytest.skip(f"the peers' venv is missing: python bench/peers/run.py --install ({py})")
    return py


def _mirror(repo: str) -> Path:
    """The git dir of ``owner/name`` among the mirrors; the test skips without it (no project file brings it)."""
    mirror = MIRRORS / repo.replace("/", "+") / "repo"
    if not mirror.exists():
        pytest.skip(f"needs a git dir of {repo} at {mirror}")
    return mirror


def _run_peer_row(runner: str, raw: dict[str, Any], tmp_path: Path, **spec: Any) -> Path:
    """The peer's runner (in its venv) for one untimed step of ``raw``, its held-out audio into the returned folder;
    its record is ``tmp_path / "out.json"``."""
    py = _peer_python()
    out = tmp_path / "audio"
    run = RunSpec(name="peer", raw=raw, kind="peer", steps=1, warmup=0, threads=1, quality_dir=str(out), **spec)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(asdict(run)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PEERS_DIR / "shims"), str(REPO)])}
    proc = subprocess.run(
        [str(py), str(PEERS_DIR / runner), str(spec_path), str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_singingvocoders_row_writes_its_resynthesis_of_the_held_out_phrases(corpus: Path, tmp_path: Path) -> None:
    """Their own trainer (their venv, their features) trains one step without the held-out phrases in its index,
    then resynthesises each held-out recording from its own mel and f0, with the pass's seed."""
    import peer_nsf

    mirror = _mirror("openvpi/SingingVocoders")
    from speechtrain.bench.peers import read_wav

    ctx = _ctx(corpus, tmp_path)
    ctx["source"] = str(peer_nsf.extract(mirror, tmp_path))
    raw = peer_nsf.seeded(peer_nsf.peer_raw(ctx), 1236)
    raw["config"]["model_args"]["discriminator_periods"] = [2]  # one small period: a quick step, the same path
    out = _run_peer_row("singing_nsf.py", raw, tmp_path)
    index = (tmp_path / "binary" / "index" / "train").read_text().split()
    assert len(index) == 8 and not {Path(p).stem for p in index} & set(ctx["held_out"])
    assert sorted(p.stem for p in out.glob("*.wav")) == sorted(ctx["held_out"])
    for i in ctx["held_out"]:
        audio, rate = read_wav(out / f"{i}.wav")
        ref, _ = read_wav(corpus / "wavs" / f"{i}.wav")
        assert rate == 22050 and abs(audio.size - ref.size) <= 256 and np.isfinite(audio).all()


def test_jik876_mel_runs_on_todays_librosa_and_torch_with_the_runners_shim(tmp_path: Path) -> None:
    """Their ``mel_spectrogram`` fails as written on librosa >= 0.10 (positional ``filters.mel``) and torch 2.x
    (``stft`` without ``return_complex``); with the runner's shim it runs and gives their log-mel: the magnitude
    (+1e-9 inside the root) of a ``center=False`` STFT of the signal reflect-padded by (n_fft - hop) / 2, through
    librosa's slaney filters, log-clamped at 1e-5."""
    librosa = need("librosa")
    import peer_hifigan
    import torch
    from jik876_hifigan import shim_meldataset

    src = peer_hifigan.extract(_mirror("jik876/hifi-gan"), tmp_path)
    sys.path.insert(0, str(src))
    sys.modules.pop("meldataset", None)
    try:
        import meldataset  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(src))
    y = torch.from_numpy(np.random.default_rng(0).uniform(-0.5, 0.5, (1, 4096)).astype(np.float32))
    with pytest.raises((TypeError, RuntimeError)):
        meldataset.mel_spectrogram(y, 1024, 80, 22050, 256, 1024, 0, 8000)  # as written: fails here
    shim_meldataset(meldataset)
    mel = meldataset.mel_spectrogram(y, 1024, 80, 22050, 256, 1024, 0, 8000).numpy()[0]
    padded = np.pad(y.numpy()[0], (384, 384), mode="reflect")
    stft = librosa.stft(padded, n_fft=1024, hop_length=256, win_length=1024, window="hann", center=False)
    basis = librosa.filters.mel(sr=22050, n_fft=1024, n_mels=80, fmin=0, fmax=8000)
    ref = np.log(np.maximum(basis @ np.sqrt(np.abs(stft) ** 2 + 1e-9), 1e-5))
    assert mel.shape == ref.shape == (80, 16)
    assert np.abs(mel - ref).max() < 1e-3
    sys.modules.pop("meldataset", None)


@pytest.mark.slow
def test_jik876_row_trains_their_step_and_writes_its_resynthesis_of_the_held_out_utterances(
    corpus: Path, tmp_path: Path
) -> None:
    """jik876/hifi-gan's own modules (their venv) train one step of their train.py's loop on the CPU, from a file
    list without the held-out utterances, then resynthesise each held-out recording as their inference.py does."""
    import peer_hifigan

    mirror = _mirror("jik876/hifi-gan")
    from speechtrain.bench.peers import read_wav

    ctx = _ctx(corpus, tmp_path)
    ctx["source"] = str(peer_hifigan.extract(mirror, tmp_path))
    raw = peer_hifigan.seeded(peer_hifigan.peer_raw(ctx), 1236)
    out = _run_peer_row("jik876_hifigan.py", raw, tmp_path, record_losses=1)
    rec = json.loads((tmp_path / "out.json").read_text())
    assert rec["steps"] == 1 and rec["samples"] == 4 and rec["precision"] == "fp32"
    assert rec["audio_seconds"] == pytest.approx(4 * 4096 / 22050)
    assert np.isfinite(rec["losses"]["mel_l1"]) and rec["losses"]["mel_l1"] > 0
    # their generator (the tiny sizes) and their full-width discriminators: ours at their settings counts the same
    from speechtrain.config import build_config
    from speechtrain.models.hifigan.task import build_discriminators

    cfg = build_config(peer_hifigan.ours_raw(ctx, False, {}))
    ours = sum(p.numel() for m in build_discriminators(cfg.model).values() for p in m.parameters())
    assert rec["trained_parameters"] > ours > 70_000_000
    assert sorted(p.stem for p in out.glob("*.wav")) == sorted(ctx["held_out"])
    for i in ctx["held_out"]:
        audio, rate = read_wav(out / f"{i}.wav")
        ref, _ = read_wav(corpus / "wavs" / f"{i}.wav")
        assert rate == 22050 and abs(audio.size - ref.size) <= 256 and np.isfinite(audio).all()


@pytest.mark.slow
def test_pipers_row_writes_its_synthesis_of_the_held_out_sentences(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piper's own trainer (its venv) trains one step of a small VITS from the csv without the held-out sentences,
    then synthesises each held-out sentence with its own phonemes."""
    import peer_vits

    mirror = _mirror("OHF-Voice/piper1-gpl")
    from speechtrain.bench.peers import read_wav

    work = tmp_path / "work"
    shutil.copytree(corpus, work / "corpus_en")
    monkeypatch.setenv(peer_vits.ENV, str(mirror))
    ctx = peer_vits.prepare(work)
    raw = peer_vits.DEFINITION.seeded(peer_vits.peer_raw(ctx), 1235)
    small = {"hidden_channels": 32, "inter_channels": 32, "filter_channels": 64, "n_layers": 1}
    small.update(upsample_initial_channel=32, resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 2]])
    raw["model"].update(small)
    out = _run_peer_row("piper_vits.py", raw, tmp_path)
    assert sorted(p.stem for p in out.glob("*.wav")) == sorted(ctx["held_out"])
    for i in ctx["held_out"]:
        audio, rate = read_wav(out / f"{i}.wav")
        assert rate == 22050 and audio.size >= 256 and np.isfinite(audio).all()
