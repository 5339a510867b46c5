"""The same-start peer mode (bench/peers/same_start.py): at step 1, from the peer's initial weights copied into ours
through our importers, on the same batch, phoneme ids and noise, every loss term equals the peer's.

VITS against Piper's own ``VitsModel._compute_loss`` (the installed piper-tts wheel's trainer; skipped where it or
lightning is absent); HiFi-GAN against jik876's ``train.py`` losses from their ``models.py`` (skipped without a git
dir of jik876/hifi-gan among the mirrors or in ``SPEECHTRAIN_JIK876``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PEERS_DIR = Path(__file__).resolve().parents[1] / "bench" / "peers"
sys.path.insert(0, str(PEERS_DIR))
MIRRORS = Path("/work/.mirror")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from speechtrain.data.demo import make_demo_corpus

    return make_demo_corpus(tmp_path_factory.mktemp("same_start") / "corpus", utterances=8, seed=0)


def _jik876() -> Path:
    env = os.environ.get("SPEECHTRAIN_JIK876")
    src = Path(env) if env else MIRRORS / "jik876+hifi-gan" / "repo"
    if not src.exists():
        pytest.skip(f"needs a clone or git dir of jik876/hifi-gan at {src} (or SPEECHTRAIN_JIK876)")
    return src


@pytest.mark.slow
def test_vits_step_one_equals_pipers_from_the_same_start(corpus: Path) -> None:
    pytest.importorskip("lightning", reason="Piper's trainer needs lightning (piper-tts[train])")
    pytest.importorskip("piper.train.vits.models", reason="Piper's trainer: pip install 'piper-tts[train]'")
    import same_start

    row = same_start.vits_step_one(corpus, seed=1234)
    assert set(row.ours) == set(row.theirs) == set(same_start.VITS_TERMS)
    bad = {k: d for k, d in row.differences().items() if d > 1e-4}
    assert not bad, row.markdown()
    assert row.theirs["mel_l1"] > 0.5 and row.theirs["fm"] > 0  # a real step, not two zeros


@pytest.mark.slow
def test_hifigan_step_one_equals_jik876s_from_the_same_start(corpus: Path, tmp_path: Path) -> None:
    """Every term, those through jik876's spectral-normed first scale discriminator included: its power iteration
    (v then u, once per call, real then fake in both stages) is ours (speechtrain.models.common.SpectralNorm)."""
    pytest.importorskip("librosa")
    import peer_hifigan
    import same_start

    source = peer_hifigan.extract(_jik876(), tmp_path)
    row = same_start.hifigan_step_one(source, corpus, seed=1234)
    assert set(row.ours) == set(row.theirs) == set(same_start.HIFIGAN_TERMS)
    bad = {k: d for k, d in row.differences().items() if d > 1e-4}
    assert not bad, row.markdown()
    assert row.theirs["mel_l1"] > 0.5 and row.theirs["fm"] > 0  # a real step, not two zeros


@pytest.fixture(scope="module")
def corpus10(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight training utterances (two batches: an epoch is two steps) and two held out."""
    from speechtrain.data.demo import make_demo_corpus

    return make_demo_corpus(tmp_path_factory.mktemp("same_start_steps") / "corpus", utterances=10, seed=0)


def test_the_batch_sequence_is_one_per_seed_and_reshuffled_each_epoch(corpus10: Path) -> None:
    """Both sides train on one sequence: the same seed gives the same crops (another seed others), two batches of
    four per epoch (eight training utterances)."""
    import same_start_steps as sss

    a, per_epoch = sss.crop_batches(corpus10, 6, seed=7, batch=4, segment=4096)
    b, _ = sss.crop_batches(corpus10, 6, seed=7, batch=4, segment=4096)
    assert per_epoch == 2 and len(a) == 6 and all(x.shape == (4, 1, 4096) for x in a)
    assert all(torch_equal(x, y) for x, y in zip(a, b, strict=True))
    c, _ = sss.crop_batches(corpus10, 6, seed=8, batch=4, segment=4096)
    assert not all(torch_equal(x, y) for x, y in zip(a, c, strict=True))
    assert all(float(x.abs().max()) > 0.1 for x in a)  # speech (a crop may fall in a pause between words)


def torch_equal(x: object, y: object) -> bool:
    import torch

    assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
    return bool(torch.equal(x, y))


@pytest.mark.slow
def test_hifigan_five_steps_follow_jik876s_from_the_same_start(corpus10: Path, tmp_path: Path) -> None:
    """Five optimizer steps of each side's own step code (their train.py's AdamW pair and per-epoch ExponentialLR;
    our StepRunner with the optimizers and schedule the recipe layer builds) over the same batches: every loss term
    of every step within 1e-3 relative (measured: <= 1.7e-4, from 2e-5 at step 1, the two codes' float order), the
    learning rates equal (decayed twice by step 5), the final weights close (the largest relative norm of the
    difference, measured after 6 steps: generator 5e-7, discriminators <= 3e-3) and the held-out resynthesis
    scored alike by one scorer."""
    pytest.importorskip("librosa")
    import peer_hifigan
    import same_start
    import same_start_steps as sss

    source = peer_hifigan.extract(_jik876(), tmp_path)
    run = sss.hifigan_steps(source, corpus10, steps=5, seed=1234, work=tmp_path / "work")
    assert [s.step for s in run.steps] == [1, 2, 3, 4, 5] and run.epoch_steps == 2
    assert all(set(s.ours) == set(s.theirs) == set(same_start.HIFIGAN_TERMS) for s in run.steps)
    rel = run.relative()
    assert max(rel) < 1e-3, run.markdown()
    assert [r["ours"] for r in run.lr] == pytest.approx([r["theirs"] for r in run.lr], rel=1e-12)
    assert run.lr[-1]["theirs"] == pytest.approx(peer_hifigan.LR * peer_hifigan.LR_DECAY**2)
    assert run.weights["generator"] < 1e-4 and max(run.weights.values()) < 1e-2, run.weights
    losses = [s.theirs["disc"] for s in run.steps]
    assert losses[-1] < losses[0]  # the steps trained: the discriminators' loss fell
    ours, theirs = run.quality["ours"], run.quality["theirs"]
    assert "mcd" in ours and set(ours) == set(theirs)  # pesq, stoi too where their packages are installed
    for metric in ours:
        assert ours[metric] == pytest.approx(theirs[metric], rel=1e-3, abs=1e-3), (metric, run.quality)


@pytest.mark.slow
def test_vits_three_steps_against_pipers_differ_only_where_the_order_differs(corpus10: Path, tmp_path: Path) -> None:
    """Three steps of Piper's training_step and of our StepRunner from the same start: the terms that read no
    discriminator update (disc, mel L1, KL, duration) stay within 1e-3 relative (measured over 3 steps: <= 1.1e-4),
    while the adversarial term is shifted by one step, as the procedures are: our G stage reads the discriminator
    after its step-k update (D then G, VITS's train.py), Piper's first reads it in step k + 1 (one forward, G stepped
    first): ours at step k equals theirs at step k + 1 (measured: <= 8e-6 relative). Piper's learning rate stays
    constant (its loop steps no scheduler); ours decays x0.999875 after the first epoch (2 steps)."""
    pytest.importorskip("lightning", reason="Piper's trainer needs lightning (piper-tts[train])")
    pytest.importorskip("piper.train.vits.models", reason="Piper's trainer: pip install 'piper-tts[train]'")
    import peer_vits as pv
    import same_start
    import same_start_steps as sss

    run = sss.vits_steps(corpus10, steps=3, seed=1234, work=tmp_path)
    assert all(set(s.ours) == set(s.theirs) == set(same_start.VITS_TERMS) for s in run.steps)
    for s in run.steps:
        for term in ("disc", "mel_l1", "kl", "dur"):
            assert abs(s.ours[term] - s.theirs[term]) <= 1e-3 * abs(s.theirs[term]), run.markdown()
    for now, later in zip(run.steps, run.steps[1:]):
        assert now.ours["adv"] == pytest.approx(later.theirs["adv"], rel=1e-3), run.markdown()
    assert run.steps[0].ours["adv"] != pytest.approx(run.steps[0].theirs["adv"], rel=1e-2)  # the order shows
    assert [r["theirs"] for r in run.lr] == [pv.LR] * 3
    assert run.lr[-1]["ours"] == pytest.approx(pv.LR * pv.GAMMA)
