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
