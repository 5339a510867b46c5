"""GPT-TTS: attention paths agree, padding is invisible, KV-cache generation equals recomputation,
the mel codec round-trips, the losses are weighted as configured, and a few steps learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speechtrain.config import load_config
from speechtrain.data.collate import collate
from speechtrain.errors import DataError, UserError
from speechtrain.models.gpt_tts.codec import MelCodec, kmeans
from speechtrain.models.gpt_tts.model import GPTTTS
from speechtrain.models.gpt_tts.task import GPTTTSTask, add_bos_eos
from speechtrain.recipes import build_task

N_MELS = 8


def tiny_cfg(*overrides: str):  # noqa: ANN201
    return load_config(
        None,
        [
            "model.name=gpt_tts",
            "model.layers=2",
            "model.width=32",
            "model.heads=4",
            "model.codebook_size=16",
            "model.frames_per_code=2",
            "model.max_text_tokens=64",
            "model.max_audio_codes=64",
            "model.codec_sample_frames=2000",
            f"data.n_mels={N_MELS}",
            "data.sample_rate=8000",
            "data.n_fft=128",
            "data.win_length=128",
            "data.hop_length=32",
            "data.fmax=null",
            *overrides,
        ],
    )


class TextMelDataset:
    """Mels determined by the text: every character is 4 frames of its own spectral pattern."""

    def __init__(self, n: int = 24, seed: int = 0) -> None:
        from speechtrain.data.text import Tokenizer

        rng = np.random.default_rng(seed)
        self.tokenizer = Tokenizer()
        self.patterns = np.random.default_rng(99).normal(-4.0, 1.5, (128, N_MELS)).astype(np.float32)
        words = ["ab", "cd", "ef", "gh", "abc", "fed"]
        self.texts = [" ".join(rng.choice(words, size=rng.integers(1, 4))) for _ in range(n)]
        self.items = []
        for i, text in enumerate(self.texts):
            tokens = np.asarray(self.tokenizer.encode(text), dtype=np.int64)
            mel = np.repeat(self.patterns[tokens].T, 4, axis=1)  # (n_mels, 4 * L)
            self.items.append({"id": f"u{i}", "mel": mel, "tokens": tokens, "text": text})
        self.frames = np.array([it["mel"].shape[1] for it in self.items])
        self.ids = [it["id"] for it in self.items]
        self.hop_length, self.sample_rate = 32, 8000

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]

    def batch(self, index: list[int]):  # noqa: ANN201
        return collate([self.items[i] for i in index], hop_length=32, sample_rate=8000)


def _model(**kw) -> GPTTTS:  # noqa: ANN003
    torch.manual_seed(0)
    args = dict(text_vocab=80, codebook_size=16, layers=2, width=32, heads=4, max_text_tokens=40, max_audio_codes=40)
    args.update(kw)
    return GPTTTS(**args).eval()


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(4, 80, (3, 9), generator=g)
    codes = torch.randint(0, 16, (3, 11), generator=g)
    return tokens, torch.tensor([9, 6, 3]), codes, torch.tensor([11, 4, 7])


def _set_sdpa(model: GPTTTS, on: bool) -> None:
    for block in model.blocks:
        block.attn.use_sdpa = on


@pytest.mark.parametrize("attention_mask", [True, False])
def test_sdpa_path_equals_math_path(attention_mask: bool) -> None:
    model = _model(attention_mask=attention_mask)
    args = _inputs()
    with torch.no_grad():
        math_out = model(*args)
        _set_sdpa(model, True)
        sdpa_out = model(*args)
    for key in ("text_logits", "audio_logits"):
        torch.testing.assert_close(sdpa_out[key], math_out[key], atol=1e-5, rtol=1e-5)


def test_padded_item_computes_what_it_would_alone() -> None:
    model = _model()
    tokens, token_lengths, codes, code_lengths = _inputs()
    with torch.no_grad():
        batch_out = model(tokens, token_lengths, codes, code_lengths)
        alone = model(tokens[1:2, :6], token_lengths[1:2], codes[1:2, :4], code_lengths[1:2])
    torch.testing.assert_close(batch_out["audio_logits"][1, :5], alone["audio_logits"][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch_out["text_logits"][1, :5], alone["text_logits"][0], atol=1e-5, rtol=1e-5)
    targets = batch_out["audio_targets"][1]
    assert targets[4].item() == model.stop_audio and (targets[5:] == -100).all()


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_kv_cache_generation_equals_no_cache(use_sdpa: bool) -> None:
    model = _model()
    _set_sdpa(model, use_sdpa)
    tokens = torch.randint(4, 80, (2, 7), generator=torch.Generator().manual_seed(2))
    greedy_cached = model.generate(tokens, 25, temperature=0.0)
    greedy_full = model.generate(tokens, 25, temperature=0.0, use_cache=False)
    sampled_cached = model.generate(tokens, 25, 1.0, 8, torch.Generator().manual_seed(5))
    sampled_full = model.generate(tokens, 25, 1.0, 8, torch.Generator().manual_seed(5), use_cache=False)
    for a, b in zip(greedy_cached + sampled_cached, greedy_full + sampled_full):
        assert a.tolist() == b.tolist()
    assert all(len(c) >= 1 and (c < 16).all() for c in sampled_cached)  # no start/stop codes inside
    assert any(len(c) > 1 for c in sampled_cached)


def test_codec_round_trip_and_error_falls_with_codebook_size() -> None:
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(12, 2 * N_MELS, generator=g) * 3
    mels = []
    for _ in range(6):  # (n_mels, T) built from 12 prototype pairs of frames plus noise
        pick = centres[torch.randint(0, 12, (40,), generator=g)]  # (40, 2 * n_mels)
        mels.append((pick.reshape(80, N_MELS).T + 0.1 * torch.randn(N_MELS, 80, generator=g)).numpy())
    errors = []
    for k in (2, 6, 24):
        codec = MelCodec(N_MELS, k, frames_per_code=2)
        codec.fit_mels(mels, iterations=8, seed=0)
        batch = torch.stack([torch.as_tensor(m) for m in mels[:2]])  # (2, n_mels, 80)
        codes = codec.encode(batch)
        assert codes.shape == (2, 40) and codes.dtype == torch.long and int(codes.max()) < k
        decoded = codec.decode(codes)
        assert decoded.shape == batch.shape
        assert torch.equal(codec.encode(decoded), codes)  # a centroid is its own nearest code
        errors.append(float((decoded - batch).pow(2).mean()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.1 * errors[0]


def test_kmeans_error_does_not_rise_and_codec_state_round_trips() -> None:
    x = torch.randn(500, 6, generator=torch.Generator().manual_seed(3))
    _, errors = kmeans(x, 10, iterations=6, seed=1)
    assert all(b <= a + 1e-5 for a, b in zip(errors, errors[1:]))
    with pytest.raises(DataError, match="codebook_size"):
        kmeans(x[:5], 10)
    codec = MelCodec(3, 10, frames_per_code=2)
    with pytest.raises(RuntimeError, match="setup"):
        codec.encode(torch.zeros(1, 3, 4))
    codec.fit(x)
    fresh = MelCodec(3, 10, frames_per_code=2)
    fresh.load_state_dict(codec.state_dict())
    assert fresh.is_fitted and torch.equal(fresh.codebook, codec.codebook)


def test_add_bos_eos() -> None:
    tokens = torch.tensor([[5, 6, 7], [8, 9, 0]])
    out, lengths = add_bos_eos(tokens, torch.tensor([3, 2]), bos=2, eos=3)
    assert out.tolist() == [[2, 5, 6, 7, 3], [2, 8, 9, 3, 0]] and lengths.tolist() == [5, 4]


def _fitted_task(*overrides: str) -> tuple[GPTTTSTask, TextMelDataset]:
    torch.manual_seed(0)
    data = TextMelDataset()
    task = build_task(tiny_cfg(*overrides))
    task.setup(data)
    return task, data


@pytest.mark.parametrize("weights", [(0.01, 1.0), (0.0, 1.0), (1.0, 0.0)])
def test_losses_weighted_as_configured(weights: tuple[float, float]) -> None:
    task, data = _fitted_task(f"model.text_loss_weight={weights[0]}", f"model.audio_loss_weight={weights[1]}")
    out = task.training_step(data.batch([0, 1, 2]), "main", {})
    torch.testing.assert_close(out["loss"], weights[0] * out["text_ce"] + weights[1] * out["audio_ce"])
    assert 0.0 <= float(out["audio_acc"]) <= 1.0
    out["loss"].backward()
    text_grad = task.model.text_head.weight.grad.abs().sum()
    audio_grad = task.model.audio_head.weight.grad.abs().sum()
    assert (text_grad > 0) == (weights[0] > 0) and (audio_grad > 0) == (weights[1] > 0)


def test_split_batch_gives_the_same_gradient() -> None:
    """Micro-batches weighted by batch_weight average like the whole batch (audio loss only: exact)."""
    task, data = _fitted_task("model.text_loss_weight=0")
    batch = data.batch([0, 3, 5, 7])
    task.training_step(batch, "main", {})["loss"].backward()
    whole = [p.grad.clone() for p in task.model.parameters()]
    task.model.zero_grad()
    parts = batch.split(2)
    total = sum(task.batch_weight(b) for b in parts)
    for part in parts:
        (task.training_step(part, "main", {})["loss"] * task.batch_weight(part) / total).backward()
    for a, p in zip(whole, task.model.parameters()):
        torch.testing.assert_close(p.grad, a, atol=1e-6, rtol=1e-4)


def test_too_long_utterance_is_a_data_error() -> None:
    data = TextMelDataset()
    task = build_task(tiny_cfg("model.max_audio_codes=4"))
    with pytest.raises(DataError, match="max_audio_codes"):
        task.setup(data)


def test_a_few_steps_learn_and_synthesize_makes_audio() -> None:
    task, data = _fitted_task()
    opt = torch.optim.AdamW(task.model.parameters(), lr=5e-3)
    rng = np.random.default_rng(0)
    first, last = [], []
    for step in range(30):
        out = task.training_step(data.batch(list(rng.choice(len(data), 6, replace=False))), "main", {})
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        (first if step < 5 else last if step >= 25 else []).append(float(out["audio_ce"]))
    assert np.mean(last) < 0.6 * np.mean(first)  # from ~2.7 nats to below 1 in this setting

    audio = task.synthesize("ab cd", temperature=0.0, max_seconds=1.0)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0 < audio.size <= 8000 and audio.size % 32 == 0
    assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
    again = task.synthesize("ab cd", temperature=0.8, top_k=4, seed=3, max_seconds=1.0)
    assert np.array_equal(again, task.synthesize("ab cd", temperature=0.8, top_k=4, seed=3, max_seconds=1.0))
    with pytest.raises(UserError, match="noise_scale"):
        task.synthesize("ab", noise_scale=0.5)
    assert len(task.eval_audio(data.batch([0, 1]), 1)) == 1


def test_accelerations_find_the_blocks_and_keep_the_gradient() -> None:
    """apply_sdpa flips every attention module; activation checkpointing wraps the repeated blocks;
    together they give the gradient of the plain model (both are exact)."""
    from speechtrain.accel import apply_activation_checkpointing, apply_sdpa

    task, data = _fitted_task()
    batch = data.batch([0, 1, 2])
    task.training_step(batch, "main", {})["loss"].backward()
    plain = [p.grad.clone() for p in task.model.parameters()]
    task.model.zero_grad()
    assert apply_sdpa(task.model, True, "cpu").applied
    assert all(block.attn.use_sdpa for block in task.model.blocks)
    record = apply_activation_checkpointing(task.model)
    assert record.applied and record.info["blocks"] == 2
    task.training_step(batch, "main", {})["loss"].backward()
    for a, p in zip(plain, task.model.parameters()):
        torch.testing.assert_close(p.grad, a, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # generation runs the plain forward under the wrapping
        tokens = torch.tensor([[2, 5, 6, 3]])
        assert task.model.eval().generate(tokens, 5, temperature=0.0)[0].numel() >= 1


@pytest.mark.parametrize("recipe", ["gpt_tts", "gpt_tts_base", "gpt_tts_tiny"])
def test_recipes_fit_their_longest_utterance(recipe: str) -> None:
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[1] / "recipes" / f"{recipe}.yaml")
    m, d = cfg.model, cfg.data
    assert m.name == "gpt_tts" and d.manifest == "data/demo" and d.bucketing and d.max_frames and d.quadratic_frames
    codes_at_max = d.max_duration * d.sample_rate / d.hop_length / m.frames_per_code
    assert codes_at_max <= m.max_audio_codes  # nothing the data filter keeps can overflow the position table
    assert m.text_loss_weight == 0.01 and m.audio_loss_weight == 1.0


def _codec_rank(rank: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    from speechtrain.recipes.common import set_up

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        data = TextMelDataset()
        task = build_task(tiny_cfg(f"model.codec_seed={rank}", "train.device=cpu"))  # different fits per rank
        set_up(task, data)  # as the recipes do on every rank: setup, then share_setup (rank 0's codebook)
        torch.save(task.codec.codebook, f"{out_dir}/{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_share_rank_zeros_codebook(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from tests.ranks import spawn_ranks

    assert all(c == 0 for c in spawn_ranks(_codec_rank, tmp_path, monkeypatch, timeout=120))
    alone = build_task(tiny_cfg("model.codec_seed=0", "train.device=cpu"))
    alone.setup(TextMelDataset())
    books = [torch.load(tmp_path / f"{r}.pt") for r in (0, 1)]
    assert torch.equal(books[0], books[1]) and torch.equal(books[0], alone.codec.codebook)


@pytest.mark.gpu
@pytest.mark.parametrize("attention_mask", [True, False])
def test_cuda_bf16_step_and_cached_generation(attention_mask: bool) -> None:
    from speechtrain.accel import apply_sdpa

    task, data = _fitted_task(f"model.attention_mask={str(attention_mask).lower()}", "train.device=cuda")
    for module in task.modules().values():
        module.to("cuda")
    apply_sdpa(task.model, True, "cuda")
    batch = data.batch([0, 1, 2, 3]).to("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = task.training_step(batch, "main", {})
    out["loss"].backward()
    assert torch.isfinite(out["loss"]) and all(torch.isfinite(p.grad).all() for p in task.model.parameters())
    task.model.eval()
    tokens = torch.tensor([[2, 5, 6, 7, 3]], device="cuda")
    cached = task.model.generate(tokens, 20, temperature=0.0)
    full = task.model.generate(tokens, 20, temperature=0.0, use_cache=False)
    assert cached[0].tolist() == full[0].tolist()
    audio = task.synthesize("ab cd", seed=0, max_seconds=0.5)
    assert audio.ndim == 1 and np.isfinite(audio).all()
