"""The measurement core: timed loop bookkeeping, the baseline's collate, and run_bench on the toy model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from speechtrain.bench.baseline import PadCollate
from speechtrain.bench.measure import timed_loop
from speechtrain.data.batch import Batch
from speechtrain.train.task import Needs

# tiny audio settings: 40 mel frames per second, so LJSpeech-like fake utterances are ~260 frames
TINY = [
    "model.name=toy",
    "model.channels=16",
    "data.n_mels=16",
    "data.batch_size=4",
    "data.sample_rate=4000",
    "data.hop_length=100",
    "data.win_length=400",
    "data.n_fft=512",
    "data.fmax=2000",
    "data.num_buckets=2",
]


def fake_batch(lengths: list[int], hop: int = 10, sr: int = 100) -> Batch:
    mel = torch.zeros(len(lengths), 4, max(lengths))
    return Batch({"mel": mel, "mel_lengths": torch.tensor(lengths)}, [str(i) for i in range(len(lengths))], hop, sr)


def test_timed_loop_counts_only_timed_steps() -> None:
    batches = iter([fake_batch([5, 10])] * 3 + [fake_batch([4, 4, 8])] * 10)
    seen: list[int] = []
    out = timed_loop(lambda b: seen.append(b.size), batches, steps=4, warmup=3, device=torch.device("cpu"))
    assert len(seen) == 7
    assert out["steps"] == 4 and out["samples"] == 12
    assert out["padded_frames"] == 4 * 24 and out["real_frames"] == 4 * 16
    assert out["audio_seconds"] == pytest.approx(4 * 16 * 10 / 100)
    assert 0.0 <= out["data_wait_seconds"] <= out["seconds"]
    assert out["gpu_busy_fraction"] is None


def test_timed_loop_window_is_at_least_the_steps_and_the_seconds() -> None:
    batches = iter([fake_batch([3])] * 100000)
    out = timed_loop(lambda b: None, batches, steps=3, warmup=0, device="cpu", min_seconds=0.05)
    assert out["steps"] >= 3 and out["seconds"] >= 0.05
    out = timed_loop(lambda b: None, iter([fake_batch([3])] * 10), steps=5, warmup=0, device="cpu", min_seconds=0)
    assert out["steps"] == 5


def test_timed_loop_counts_page_faults_of_the_window() -> None:
    out = timed_loop(lambda b: torch.ones(256, 1024), iter([fake_batch([3])] * 5), steps=4, warmup=1, device="cpu")
    assert isinstance(out["page_faults"], int) and out["page_faults"] >= 0


def test_timed_loop_time_limit_keeps_two_steps() -> None:
    batches = iter([fake_batch([3])] * 10)
    out = timed_loop(lambda b: None, batches, steps=8, warmup=0, device="cpu", time_limit=0.0)
    assert out["steps"] == 2


def test_pad_collate_pads_and_crops_in_step() -> None:
    needs = Needs(mel=True, audio=True, labels=True)
    hop = 4
    items = []
    for i, t in enumerate([6, 9]):
        mel = np.arange(t, dtype=np.float32)[None, :].repeat(2, 0)  # (n_mels=2, T)
        items.append({"id": f"u{i}", "mel": mel, "audio": np.repeat(mel[0], hop), "label": i})
    batch = PadCollate(needs, hop, 16)(items)
    assert batch["mel"].shape == (2, 2, 9) and batch["audio"].shape == (2, 1, 36)
    assert batch.host_lengths["mel_lengths"] == [6, 9] and batch["labels"].tolist() == [0, 1]
    assert batch["mel"][0, :, 6:].abs().sum() == 0
    cropped = PadCollate(needs, hop, 16, crop_frames=5)(items)
    assert cropped["mel"].shape[-1] == 5 and cropped["audio"].shape[-1] == 20
    for b in range(2):  # audio sample t*hop of a crop belongs to mel frame t of the same crop
        assert torch.equal(cropped["audio"][b, 0, ::hop], cropped["mel"][b, 0])


def test_pad_collate_carries_the_transcripts_when_the_task_reads_text() -> None:
    items = [{"id": f"u{i}", "audio": np.zeros(8 * (i + 1), np.float32), "text": t} for i, t in enumerate("ab")]
    assert PadCollate(Needs(text=True, audio=True, mel=False), 4, 16)(items).texts == ["a", "b"]
    assert PadCollate(Needs(audio=True, mel=False), 4, 16)(items).texts == []


def test_pad_collate_carries_f0_cropped_with_the_mel() -> None:
    """The plain loop of an NSF vocoder needs f0 (the ladder's baseline and Lightning rows failed with 'the
    batch has no f0'): padded with 0 (unvoiced), and cropped with the same window as the mel."""
    t = [10, 6]
    items = [
        {
            "id": f"u{i}",
            "mel": np.tile(np.arange(n, dtype=np.float32), (3, 1)),
            "audio": np.repeat(np.arange(n, dtype=np.float32), 4),
            "f0": 100.0 + np.arange(n, dtype=np.float32),
        }
        for i, n in enumerate(t)
    ]
    batch = PadCollate(Needs(mel=True, audio=True, f0=True), 4, 16)(items)
    assert batch["f0"].shape == (2, 10) and float(batch["f0"][1, 6:].abs().sum()) == 0.0
    cropped = PadCollate(Needs(mel=True, audio=True, f0=True), 4, 16, crop_frames=4)(items)
    assert cropped["f0"].shape == (2, 4)
    torch.testing.assert_close(cropped["f0"] - 100.0, cropped["mel"][:, 0, :])  # the same frames


def test_run_bench_json_shape_and_consistency(tmp_path) -> None:
    from speechtrain.config import load_config
    from speechtrain.recipes.bench import run_bench

    cfg = load_config(None, TINY)
    rep = run_bench(cfg, steps=2, warmup=1, min_seconds=0, repeat=1, isolate=False, fake_data=12, measure_peak=False)
    json.dumps(rep)
    assert [r["key"] for r in rep["runs"]] == ["baseline", "fair_baseline", "config"]
    base = rep["runs"][0]
    assert base["flops_per_padded_frame"] and base["flops_per_padded_frame"] > 0
    for r in rep["runs"]:
        assert r["steps"] == 2
        assert r["audio_seconds"] > 0 and r["seconds"] > 0
        assert r["audio_seconds_per_second"] == pytest.approx(r["audio_seconds"] / r["seconds"])
        assert r["speedup_vs_baseline"] == pytest.approx(
            r["audio_seconds_per_second"] / base["audio_seconds_per_second"]
        )
        assert r["peak_memory_bytes"] > 0
        assert r["gpu_busy_fraction"] is None
    assert rep["runs"][2]["applied"]["bucketing"]["applied"] is True  # the default config buckets
    assert rep["device"]["type"] == "cpu"
    assert rep["bottleneck"]["kind"] in {"input-bound", "compute-bound", "memory-bound"}


@pytest.mark.slow
def test_bench_cli_ablate_writes_outputs(tmp_path, capsys) -> None:
    from speechtrain.cli.main import main

    skips = ["compile", "activation_checkpointing", "channels_last", "fused_optimizer", "loader", "precision", "engine"]
    skips += ["lightning", "cpu_allocator"]  # rows added by issue 12 (tested on their own)
    skips += ["fair_baseline", "memory_saving", "all_compile"]  # rows added by issue 36 (tested on their own)
    args = ["bench", "--ablate", "--steps", "2", "--warmup", "1", "--min-seconds", "0", "--repeat", "2"]
    args += ["--fake-data", "10"]
    args += [a for s in skips for a in ("--skip", s)]
    args += [
        "--json",
        str(tmp_path / "b.json"),
        "--markdown",
        str(tmp_path / "b.md"),
        "--plot",
        str(tmp_path / "b.png"),
    ]
    assert main(args + TINY) == 0
    rep = json.loads((tmp_path / "b.json").read_text())
    keys = [r["key"] for r in rep["runs"]]
    # the "+ SDPA" rung is gone: SDPA is the model's default and the baseline's; the naive row is listed beside it
    assert keys == ["baseline", "naive_attention", "bucketing", "all"]
    assert {s["key"] for s in rep["skipped"]} >= set(skips) | {"tf32", "cudnn_benchmark", "tuned_batch"}
    assert {s["key"] for s in rep["skipped"]} >= {"all_eager", "all_graphs"}  # same as "all" / no CUDA here
    sdpa = next(r for r in rep["runs"] if r["key"] == "all")
    assert sdpa["applied"]["sdpa"]["applied"] is True
    naive = next(r for r in rep["runs"] if r["key"] == "naive_attention")
    assert naive["applied"]["explicit_attention"]["info"]["modules"] > 0
    assert (tmp_path / "b.png").stat().st_size > 0
    assert "| + bucketing |" in (tmp_path / "b.md").read_text()
    assert "Bottleneck:" in capsys.readouterr().out


def test_bench_cli_rejects_bad_arguments() -> None:
    from speechtrain.cli.main import main

    assert main(["bench", "--steps", "0", "--fake-data", "4"]) == 2
    assert main(["bench", "--plot", "x.jpg", "--fake-data", "4"]) == 2
    assert main(["bench", "--ablate", "--skip", "warp", "--fake-data", "4", *TINY]) == 2


@pytest.mark.gpu
def test_run_bench_on_cuda_reports_device_memory_busy_share_and_mfu() -> None:
    from speechtrain.config import load_config
    from speechtrain.recipes.bench import run_bench

    cfg = load_config(None, [*TINY, "train.device=cuda"])
    rep = run_bench(cfg, steps=4, warmup=2, min_seconds=0, repeat=1, isolate=True, fake_data=16)
    assert rep["device"]["type"] == "cuda" and rep["device"]["total_memory_bytes"] > 0
    for r in rep["runs"]:
        assert 0 < r["peak_memory_bytes"] < rep["device"]["total_memory_bytes"]
        try:
            import pynvml  # noqa: F401
        except ImportError:
            assert r["gpu_busy_fraction"] is None
        else:
            assert r["gpu_busy_fraction"] is None or 0.0 <= r["gpu_busy_fraction"] <= 1.0
    if rep["device"]["probe"].get("peak_fp32_tflops"):
        assert rep["runs"][0]["mfu"] is not None and 0 < rep["runs"][0]["mfu"] < 1


def test_families_default_to_sdpa_and_the_plain_loop_keeps_it() -> None:
    from speechtrain.accel.sdpa import attention_modules
    from speechtrain.bench.baseline import PlainLoop
    from speechtrain.config import load_config
    from speechtrain.recipes.common import build_task

    cfg = load_config(None, TINY)
    for explicit in (False, True):
        task = build_task(cfg)
        mods = [m for module in task.modules().values() for _, m in attention_modules(module)]
        assert mods and all(m.use_sdpa for m in mods)  # the family's default: SDPA
        loop = PlainLoop(cfg, task, torch.device("cpu"), explicit_attention=explicit)
        assert all(m.use_sdpa is not explicit for m in mods)
        assert loop.explicit_attention_modules == (len(mods) if explicit else 0)


def test_ladder_reference_is_the_sdpa_baseline_and_the_naive_row_is_not() -> None:
    from speechtrain.bench.ablate import RUNGS, all_off, plan_ladder
    from speechtrain.config import load_config

    cfg = load_config(None, TINY)
    rows = plan_ladder(cfg.data, "cpu")
    keys = [r.key for r in rows]
    assert "sdpa" not in RUNGS and keys[0] == "baseline"
    naive = next(r for r in rows if r.key == "naive_attention")
    assert naive.kind == "baseline" and naive.overrides == {"accel.sdpa": False}
    assert all_off("cpu")["accel.sdpa"] is True  # "all off" attends as the baseline does


def test_fake_data_is_tokenized_with_the_runs_symbols() -> None:
    """--fake-data with a text model whose symbols were learned (or pinned): the synthetic transcripts are
    tokenized as the model reads them (with the ASCII default, bench of gpt_tts_tiny failed on every row)."""
    from speechtrain.config import load_config
    from speechtrain.data.text import Tokenizer
    from speechtrain.recipes.data import DataRecipe

    cfg = load_config("recipes/gpt_tts_tiny.yaml", ["data.symbols=[a, b, c, ' ']"])
    fake = DataRecipe(cfg).synthetic(8, Needs(text=True))
    vocab = Tokenizer.from_data(cfg.data).vocab_size
    assert max(int(fake[i]["tokens"].max()) for i in range(len(fake))) < vocab


def test_fair_baseline_row_runs_beside_the_plain_loop_and_says_what_it_is() -> None:
    """The loop a competent user writes (bf16 autocast where the device has fast bf16, SDPA, fused AdamW, the same
    random batches) is measured beside the plain fp32 loop; on a CPU it stays fp32 and the headline is against the
    plain loop, naming the fair ratio beside it."""
    from speechtrain.bench.baseline import fair_precision
    from speechtrain.config import load_config
    from speechtrain.recipes.bench import run_bench

    cfg = load_config(None, TINY)
    rep = run_bench(cfg, steps=2, warmup=1, min_seconds=0, repeat=1, isolate=False, fake_data=12, measure_peak=False)
    runs = {r["key"]: r for r in rep["runs"]}
    fair, config = runs["fair_baseline"], runs["config"]
    assert fair_precision("cpu") == "fp32" and fair["precision"] == "fp32"
    assert fair["name"] == "fair baseline (fp32: no fast bf16 here; SDPA, fused AdamW)"
    assert "fused AdamW" in fair["applied"]["fair_loop"]["detail"]  # the kernel it really got
    assert fair["applied_summary"].startswith("not speechtrain:")
    assert fair["mean_batch_size"] == runs["baseline"]["mean_batch_size"] == 4  # the recipe's batch size
    assert config["speedup_vs_fair"] == pytest.approx(
        config["audio_seconds_per_second"] / fair["audio_seconds_per_second"]
    )
    head = rep["headline"]
    assert head["key"] == "config" and head["reference"] == "baseline"  # on a CPU: the plain loop, said so
    assert "plain fp32 PyTorch loop" in head["text"] and "vs the fair baseline" in head["text"]


def test_the_gpu_headline_is_against_the_fair_baseline() -> None:
    from speechtrain.bench.ablate import LadderRow, Variant, fair_variant
    from speechtrain.bench.measure import RunResult
    from speechtrain.bench.report import build_report

    def res(name: str, rate: float) -> RunResult:
        return RunResult(name, 10, 1.0, 40, rate, 100, 100, 0.0, 1 << 30, precision="bf16")

    rows = [
        LadderRow(Variant("baseline", "baseline", kind="baseline"), res("baseline", 100.0), rates=[100.0]),
        LadderRow(fair_variant("cpu"), res("fair", 250.0), rates=[250.0]),
        LadderRow(Variant("all", "all (recommended settings)"), res("all", 500.0), rates=[500.0]),
    ]
    rep = build_report(rows, {"type": "cuda", "name": "a GPU"})
    head = rep["headline"]
    assert head["reference"] == "fair_baseline" and head["speedup"] == pytest.approx(2.0)
    assert head["speedup_vs_baseline"] == pytest.approx(5.0)
    assert "vs the fair baseline" in head["text"] and "vs the plain fp32 loop: 5.00x" in head["text"]
