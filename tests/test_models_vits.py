"""VITS: attention paths agree, flows invert, the tiny model trains and synthesizes, recipe sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from speechtrain.config import ConfigError, load_config
from speechtrain.data.batch import Batch
from speechtrain.recipes import build_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "vits_tiny.yaml"
HOP = 256


def _random_batch(frames: list[int], tokens: list[int], seed: int = 0, speakers: list[int] | None = None) -> Batch:
    g = torch.Generator().manual_seed(seed)
    b = len(frames)
    audio = torch.zeros(b, 1, max(frames) * HOP)
    toks = torch.zeros(b, max(tokens), dtype=torch.long)
    for i, (f, t) in enumerate(zip(frames, tokens)):
        audio[i, 0, : f * HOP] = 0.3 * torch.randn(f * HOP, generator=g)
        toks[i, :t] = torch.randint(5, 40, (t,), generator=g)
    tensors = {
        "audio": audio,
        "audio_lengths": torch.tensor(frames) * HOP,
        "tokens": toks,
        "token_lengths": torch.tensor(tokens),
    }
    if speakers is not None:
        tensors["speakers"] = torch.tensor(speakers)
    return Batch(tensors, [f"u{i}" for i in range(b)], HOP, 22050)


@pytest.fixture(scope="module")
def tiny_task():
    torch.manual_seed(0)
    return build_task(load_config(TINY))


def test_sdpa_path_matches_math_path_with_relative_positions() -> None:
    from speechtrain.models.vits.attentions import RelativeMultiHeadAttention

    torch.manual_seed(0)
    attn = RelativeMultiHeadAttention(channels=16, n_heads=2, window_size=3, p_dropout=0.1).eval()
    for length in (1, 4, 11):  # shorter than, equal to and longer than the window band
        x = torch.randn(3, 16, length)
        key_mask = torch.arange(length)[None] < torch.tensor([length, max(1, length - 3), 1])[:, None]
        attn.use_sdpa = False
        ref = attn(x, key_mask)
        attn.use_sdpa = True
        assert attn.sdpa_active
        out = attn(x, key_mask)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_sdpa_path_gradients_match(tiny_task) -> None:
    from speechtrain.models.vits.attentions import RelativeMultiHeadAttention

    torch.manual_seed(1)
    attn = RelativeMultiHeadAttention(channels=8, n_heads=2, window_size=2, p_dropout=0.0).train()
    x = torch.randn(2, 8, 7)
    key_mask = torch.arange(7)[None] < torch.tensor([7, 5])[:, None]
    grads = []
    for use in (False, True):
        attn.use_sdpa = use
        attn.zero_grad()
        (attn(x, key_mask) * key_mask[:, None]).square().sum().backward()
        grads.append(attn.emb_rel_v.grad.clone())
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_sdpa_falls_back_to_math_while_attention_dropout_is_active() -> None:
    from speechtrain.models.vits.attentions import RelativeMultiHeadAttention

    attn = RelativeMultiHeadAttention(8, 2, 2, p_dropout=0.1)
    attn.use_sdpa = True
    assert not attn.train().sdpa_active and attn.eval().sdpa_active


def test_flow_and_spline_invert() -> None:
    from speechtrain.models.vits.model import ResidualCouplingBlock
    from speechtrain.models.vits.modules import ConvFlow, rational_quadratic_spline

    torch.manual_seed(0)
    x = torch.randn(6, 40) * 3
    w, h, d = torch.randn(6, 40, 8), torch.randn(6, 40, 8), torch.randn(6, 40, 7)
    y, logdet = rational_quadratic_spline(x, w, h, d)
    x_back, logdet_inv = rational_quadratic_spline(y, w, h, d, inverse=True)
    torch.testing.assert_close(x_back, x, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logdet_inv, -logdet, atol=1e-4, rtol=1e-4)

    mask = torch.ones(2, 1, 9)
    mask[1, :, 6:] = 0
    flow = ResidualCouplingBlock(4, 8, 3, 1, 2, n_flows=2)
    conv_flow = ConvFlow(2, 8, 3, 2)
    for p in list(flow.parameters()) + list(conv_flow.parameters()):  # leave the identity initialisation
        p.data.add_(0.1 * torch.randn_like(p))
    z = torch.randn(2, 4, 9) * mask
    torch.testing.assert_close(flow(flow(z, mask), mask, reverse=True), z, atol=1e-5, rtol=1e-5)
    z2 = torch.randn(2, 2, 9) * mask
    out, _ = conv_flow(z2, mask)
    torch.testing.assert_close(conv_flow(out, mask, reverse=True), z2, atol=1e-4, rtol=1e-4)


def test_generate_path_and_slices() -> None:
    from speechtrain.models.vits.model import generate_path, random_slice_starts, slice_segments

    durations = torch.tensor([[[2.0, 1.0, 3.0]], [[1.0, 2.0, 0.0]]])  # (B, 1, T_tokens)
    mask = torch.ones(2, 1, 6, 3)
    mask[1, :, 3:] = 0
    mask[1, :, :, 2:] = 0
    path = generate_path(durations, mask)[:, 0]  # (B, T_frames, T_tokens)
    assert path[0].argmax(1).tolist() == [0, 0, 1, 2, 2, 2]
    assert path[1, :3].argmax(1).tolist() == [0, 1, 1] and path[1, 3:].sum() == 0

    lengths = torch.tensor([50, 10, 4])
    starts = random_slice_starts(lengths, 8)
    assert (starts >= 0).all() and (starts[:2] + 8 <= lengths[:2]).all() and starts[2] == 0
    x = torch.arange(60.0).expand(3, 2, 60)
    sliced = slice_segments(x, torch.tensor([0, 5, 55]), 8)
    assert sliced.shape == (3, 2, 8)
    assert sliced[1, 0].tolist() == list(range(5, 13))
    assert sliced[2, 0].tolist() == [55, 56, 57, 58, 59, 0, 0, 0]  # zero past the end


def test_tiny_forward_backward_is_finite_and_reaches_every_parameter(tiny_task) -> None:
    torch.manual_seed(0)
    batch = _random_batch([40, 25, 12], [10, 7, 4])
    cache: dict = {}
    metrics = {}
    for stage in ("disc", "gen"):
        out = tiny_task.training_step(batch, stage, cache)
        out["loss"].backward()
        metrics.update({k: float(v.detach()) for k, v in out.items() if k != "loss"})
    assert set(metrics) == {"disc", "mel_l1", "kl", "dur", "adv", "fm"}
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    for name, module in tiny_task.modules().items():
        for pname, p in module.named_parameters():
            assert p.grad is not None, f"{name}.{pname} got no gradient"
            assert torch.isfinite(p.grad).all(), f"{name}.{pname} has a non-finite gradient"
    for m in tiny_task.modules().values():
        m.zero_grad(set_to_none=True)


def test_gen_stage_leaves_the_discriminator_gradients_alone(tiny_task) -> None:
    # the adversarial loss flows through D into the generator; D's own .grad must stay untouched, or it
    # would leak into D's next update whenever the engine zeroes gradients only after each stage's step
    batch = _random_batch([30, 20], [8, 5], seed=6)
    tiny_task.training_step(batch, "gen", {})["loss"].backward()
    assert all(p.grad is None for p in tiny_task.discriminator.parameters())
    assert all(p.requires_grad for p in tiny_task.discriminator.parameters())
    assert tiny_task.generator.dec.conv_post.parametrizations.weight.original1.grad is not None
    tiny_task.generator.zero_grad(set_to_none=True)


def test_gen_stage_recomputes_with_an_empty_cache(tiny_task) -> None:
    batch = _random_batch([30, 20], [8, 5], seed=3)
    out = tiny_task.training_step(batch, "gen", {})
    assert torch.isfinite(out["loss"]) and out["loss"].requires_grad
    disc = tiny_task.training_step(batch, "disc", {})
    assert torch.isfinite(disc["loss"])
    with pytest.raises(ValueError, match="stage"):
        tiny_task.training_step(batch, "nope", {})


def test_deterministic_duration_predictor_and_speakers() -> None:
    cfg = load_config(
        TINY, ["model.use_sdp=false", "model.n_speakers=3", "model.gin_channels=8", "model.add_blank=false"]
    )
    task = build_task(cfg)
    assert task.needs().speakers and task.needs().text and task.needs().audio and not task.needs().mel
    batch = _random_batch([30, 20], [8, 5], seed=4, speakers=[0, 2])
    out = task.training_step(batch, "gen", {})
    out["loss"].backward()
    assert torch.isfinite(out["dur"]) and task.generator.emb_g.weight.grad is not None
    wav = task.synthesize("two voices", speaker=2, seed=0)
    assert wav.ndim == 1 and wav.size > 0 and task.last_inference_info["tokens"] == len("two voices")
    from speechtrain.errors import UserError

    with pytest.raises(UserError, match="out of range"):
        task.synthesize("two voices", speaker=5)


def test_eval_step_is_repeatable_and_eval_audio_has_plausible_length(tiny_task) -> None:
    batch = _random_batch([40, 25], [10, 7], seed=5)
    a, b = tiny_task.eval_step(batch), tiny_task.eval_step(batch)
    assert set(a) == {"loss", "mel_l1", "kl", "dur"}
    assert all(torch.equal(a[k], b[k]) for k in a)  # fixed-seed slices: comparable between evaluations
    wavs = tiny_task.eval_audio(batch, 1)
    assert len(wavs) == 1 and wavs[0].ndim == 1 and wavs[0].size % HOP == 0 and wavs[0].size >= 10 * HOP


def test_synthesize_reports_what_ran(tiny_task) -> None:
    wav = tiny_task.synthesize("hello world", noise_scale=0.5, length_scale=2.0, seed=0)
    info = tiny_task.last_inference_info
    assert wav.dtype.name == "float32" and wav.size == info["samples"] == info["frames"] * HOP
    assert info["decoder_precision"] == "fp32" and not info["decoder_compiled"] and info["device"] == "cpu"
    assert info["tokens"] == 2 * len("hello world") + 1  # add_blank: a blank around every character
    assert info["frames"] >= info["tokens"]  # every token lasts at least one frame
    again = tiny_task.synthesize("hello world", noise_scale=0.5, length_scale=2.0, seed=0)
    assert (again == wav).all()  # the seed fixes the noise
    faster = tiny_task.synthesize("hello world", noise_scale=0.5, length_scale=1.0, seed=0)
    assert faster.size <= wav.size  # same sampled durations, rounded up after scaling
    from speechtrain.errors import UserError

    with pytest.raises(UserError, match="unknown option"):
        tiny_task.synthesize("hi", temperature=0.7)


def test_bf16_decoder_on_the_cpu_is_reported_and_close_to_fp32() -> None:
    torch.manual_seed(0)
    task = build_task(load_config(TINY, ["model.inference_precision=bf16"]))
    ref = build_task(load_config(TINY))
    for name, module in ref.modules().items():
        module.load_state_dict(task.modules()[name].state_dict())
    wav = task.synthesize("hello", seed=0)
    assert task.last_inference_info["decoder_precision"] == "bf16" and wav.dtype.name == "float32"
    wav32 = ref.synthesize("hello", seed=0)
    assert ref.last_inference_info["decoder_precision"] == "fp32" and wav.shape == wav32.shape
    diff = float(abs(wav - wav32).max())
    assert 0 < diff < 0.05 * float(abs(wav32).max())  # bf16 took effect; same durations, only rounding differs


def test_recipe_parameter_counts_without_allocating() -> None:
    cfg = load_config(ROOT / "recipes" / "vits.yaml")
    assert (cfg.model.hidden_channels, cfg.model.filter_channels, cfg.model.n_layers) == (192, 768, 6)
    with torch.device("meta"):
        counts = build_task(cfg).parameter_counts()
    assert 34e6 < counts["generator"] < 39e6
    assert 44e6 < counts["discriminator"] < 49e6
    assert 80e6 < counts["total"] < 86e6  # about 83M, as documented in the recipe
    rtx = load_config(ROOT / "recipes" / "vits_rtx4090.yaml")
    # the reference decay (0.999875 per epoch), not the summary's 0.9999 per step (x0.0067 by step 50k)
    assert rtx.optim.gamma == 0.999875 and rtx.optim.scheduler_interval == "epoch" and rtx.accel.compile is True
    assert rtx.train.keep_checkpoints == 8 and rtx.train.best_after == 5000 and rtx.data.batch_size == 64


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="hop_length"):
        build_task(load_config(TINY, ["data.hop_length=200"]))
    with pytest.raises(ConfigError, match="segment_size"):
        build_task(load_config(TINY, ["model.segment_size=3000"]))
    with pytest.raises(ConfigError, match="n_heads"):
        load_config(TINY, ["model.n_heads=3"])


def test_an_unalignable_utterance_is_named(tiny_task) -> None:
    from speechtrain.errors import DataError

    batch = _random_batch([40, 6], [10, 5])  # 6 frames for 5 characters = 11 tokens with blanks
    with pytest.raises(DataError, match="'u1': 6 frames for 11 tokens"):
        tiny_task.training_step(batch, "disc", {})


def test_setup_refuses_more_speakers_than_the_embedding(tiny_task) -> None:
    class FakeDataset:
        speakers = ["a", "b"]

    with pytest.raises(ConfigError, match="n_speakers=2"):
        tiny_task.setup(FakeDataset())


@pytest.mark.slow
def test_tiny_vits_trains_on_the_demo_corpus_and_synthesizes(demo_corpus: Path, tmp_path: Path) -> None:
    from speechtrain.recipes.train import train_from_config

    torch.manual_seed(0)
    run = tmp_path / "run"
    cfg = load_config(
        TINY,
        [
            f"data.manifest={demo_corpus}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.output_dir={run}",
            "train.max_steps=80",
            "train.log_every=10",
            "train.eval_every=80",
            "train.save_every=80",
            "train.progress=false",
        ],
    )
    run_dir, _ = train_from_config(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "mel_l1" in r and r.get("split", "train") == "train"]
    # each row averages 10 steps of random slices; compare the first and last 20 steps
    first = sum(r["mel_l1"] for r in train_rows[:2]) / 2
    last = sum(r["mel_l1"] for r in train_rows[-2:]) / 2
    assert last < 0.85 * first, f"mel_l1 {first:.3f} -> {last:.3f}: expected a fall of at least 15%"

    out = tmp_path / "x.wav"
    text = "the cat sat on the mat"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "speechtrain",
            "synthesize",
            str(run_dir),
            "--text",
            text,
            "--out",
            str(out),
            "--device",
            "cpu",
            "--seed",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    import soundfile as sf

    wav, sr = sf.read(str(out))
    assert sr == cfg.data.sample_rate
    # at least one frame per token, at most 60 frames per token (a generous bound on sampled durations)
    assert len(text) * HOP <= wav.size <= len(text) * 60 * HOP


@pytest.mark.gpu
def test_cuda_sdpa_matches_math_and_bf16_step_is_finite() -> None:
    from speechtrain.models.vits.attentions import RelativeMultiHeadAttention

    torch.manual_seed(0)
    attn = RelativeMultiHeadAttention(192, 2, 4, p_dropout=0.1).cuda().eval()
    x = torch.randn(4, 192, 57, device="cuda")
    key_mask = torch.arange(57, device="cuda")[None] < torch.tensor([57, 40, 9, 1], device="cuda")[:, None]
    attn.use_sdpa = False
    ref = attn(x, key_mask)
    attn.use_sdpa = True
    torch.testing.assert_close(attn(x, key_mask), ref, atol=1e-3, rtol=1e-3)  # TF32 may be on

    task = build_task(load_config(TINY, ["model.inference_precision=bf16", "model.inference_compile=true"]))
    for m in task.modules().values():
        m.cuda()
    batch = _random_batch([40, 25, 12], [10, 7, 4]).to("cuda")
    cache: dict = {}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for stage in ("disc", "gen"):
            out = task.training_step(batch, stage, cache)
            assert torch.isfinite(out["loss"])
            out["loss"].backward()
    wav = task.synthesize("hello world", seed=0)
    info = task.last_inference_info
    assert wav.size == info["samples"] > 0
    assert info["decoder_precision"] == "bf16" and info["decoder_compiled"] and info["device"].startswith("cuda")


@pytest.mark.slow
def test_resume_continues_the_same_run(demo_corpus: Path, tmp_path: Path) -> None:
    from speechtrain.recipes.train import train_from_config

    def overrides(run: str, steps: int) -> list[str]:
        return [
            f"data.manifest={demo_corpus}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.output_dir={tmp_path / run}",
            f"train.max_steps={steps}",
            "train.log_every=1",
            "train.save_every=3",
            "train.eval_every=100",
            "train.progress=false",
        ]

    def rows(run: str) -> list[tuple]:
        keys = ("step", "mel_l1", "kl", "dur", "disc", "grad_norm_disc", "grad_norm_gen")
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [tuple(r[k] for k in keys) for r in map(json.loads, lines) if r["split"] == "train"]

    train_from_config(load_config(TINY, overrides("straight", 5)))
    train_from_config(load_config(TINY, overrides("resumed", 3)))
    train_from_config(load_config(TINY, overrides("resumed", 5)), resume=tmp_path / "resumed")
    assert rows("resumed") == rows("straight")  # same losses and gradient norms, bit for bit
