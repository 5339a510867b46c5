"""VITS as VITS (jaywalnut310) and Piper define it: the mel loss's magnitude epsilon and target, the decoder's
bias-free ``conv_post``, ``fm`` logged with its weight. The HiFi-GAN vocoder keeps HiFi-GAN's epsilon and bias."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from speechtrain.config import load_config
from speechtrain.models.vits.model import slice_segments
from speechtrain.recipes import build_task
from tests.test_models_vits import _random_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_task():
    torch.manual_seed(0)
    return build_task(load_config(ROOT / "recipes" / "vits_tiny.yaml"))


def test_a_silent_bin_reads_vits_magnitude_epsilon(tiny_task) -> None:
    silence = torch.zeros(1, 1, 20 * 256)
    # VITS's spectrogram_torch: sqrt(|X|^2 + 1e-6), so a silent linear bin is 1e-3 (HiFi-GAN's 1e-9: 3.2e-5)
    spec = tiny_task._spec(silence)
    torch.testing.assert_close(spec, torch.full_like(spec, 1e-3))
    mel = tiny_task._mel(silence)[0, :, 5]  # (n_mels,)
    fb = tiny_task.mel_fn.fb
    expected = torch.log(torch.clamp(fb.sum(dim=1) * 1e-3, min=1e-5))
    torch.testing.assert_close(mel, expected)
    assert (mel > math.log(1e-5) + 0.5).sum() > fb.shape[0] // 2  # most bins sit above HiFi-GAN's floor -11.51


def test_the_hifigan_vocoder_keeps_hifigans_epsilon_and_conv_post_bias() -> None:
    task = build_task(load_config(ROOT / "recipes" / "vocoder_hifigan_tiny.yaml"))
    mel = task.mel_fn(torch.zeros(1, 1, 20 * 256))
    assert torch.all(mel == math.log(1e-5))  # sqrt(1e-9) x any filter's sum stays under the 1e-5 floor
    assert task.generator.conv_post.bias is not None


def test_the_target_mel_is_the_utterances_mel_sliced(tiny_task) -> None:
    torch.manual_seed(3)
    batch = _random_batch([40, 25, 30], [10, 7, 8], seed=2)
    with torch.no_grad():
        out, y, mel_target = tiny_task._generate(batch)
        full = tiny_task.mel_fn(batch["audio"])  # (B, n_mels, T_frames) of the whole utterances
        expected = slice_segments(full, out.slice_starts, tiny_task.segment_frames)
        torch.testing.assert_close(mel_target, expected)
        # not the mel of the audio slice alone: its edge frames are padded from inside the slice
        assert (mel_target - tiny_task._mel(y)).abs().max() > 1e-2


def test_the_decoders_conv_post_has_no_bias(tiny_task) -> None:
    assert tiny_task.generator.dec.conv_post.bias is None
    names = [n for n, _ in tiny_task.generator.named_parameters() if n.startswith("dec.conv_post")]
    assert not [n for n in names if n.endswith("bias")]


def test_fm_is_logged_with_its_weight(tiny_task, monkeypatch: pytest.MonkeyPatch) -> None:
    import speechtrain.models.vits.task as vits_task

    unweighted = torch.tensor(0.25, requires_grad=True)
    monkeypatch.setattr(vits_task, "feature_matching_loss", lambda real, fake: unweighted * 1.0)
    batch = _random_batch([30, 20], [8, 5], seed=4)
    out = tiny_task.training_step(batch, "gen", {})
    assert tiny_task.cfg.c_fm == 2.0
    assert float(out["fm"]) == pytest.approx(2.0 * 0.25)
    c = tiny_task.cfg
    parts = c.c_mel * out["mel_l1"] + c.c_kl * out["kl"] + c.c_dur * out["dur"] + c.c_adv * out["adv"] + out["fm"]
    assert float(out["loss"].detach()) == pytest.approx(float(parts.detach()), rel=1e-6)
