"""The peers' comparison (speechtrain.bench.peers and bench/peers/): ratios, verdicts and flags from fabricated
rows, the meter the peer runners use, the torchaudio shim, the settings both sides share, the CLI's --peers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from speechtrain.bench.ablate import LadderRow, Variant, _median_row
from speechtrain.bench.measure import RunResult
from speechtrain.bench.peers import AUTO, PEER, SAME, PeerRun, build_peer_report, peers_markdown
from tests.peers import need

PEERS_DIR = Path(__file__).resolve().parents[1] / "bench" / "peers"
sys.path.insert(0, str(PEERS_DIR))

CPU = {"type": "cpu", "name": "test cpu", "cpu_count": 2, "usable_cores": 2, "date": "today"}


def _result(name: str, rate: float, **kw: Any) -> RunResult:
    base: dict[str, Any] = dict(
        steps=10,
        samples=40,
        padded_frames=1000,
        real_frames=700,
        data_wait_seconds=0.1,
        peak_memory_bytes=2**30,
        losses={"loss": 3.0, "mel_l1": 1.5},
        trained_parameters=1000,
        host_load=2.0,
        threads=2,
    )
    base.update(kw)
    return RunResult(name=name, seconds=10.0 / rate, audio_seconds=10.0, **base)


def _row(key: str, rates: list[float | None], **kw: Any) -> LadderRow:
    v = Variant(key, {PEER: "their trainer", SAME: "ours, their settings", AUTO: "ours, autopilot"}[key])
    runs = [LadderRow(v, None if r is None else _result(key, r, **kw)) for r in rates]
    row = _median_row(runs)
    row.rates = list(rates)
    return row


def _peer(rates: dict[str, list[float]], **kw: Any) -> PeerRun:
    return PeerRun(
        key="xtts",
        title="XTTS",
        rows=[_row(k, r, **kw) for k, r in rates.items()],
        settings="batch 8, fp32",
        shims=["torchaudio shim"],
        commands={PEER: "peer command", SAME: "same command"},
        loss_keys={PEER: "loss", SAME: "loss", AUTO: "loss"},
    )


def test_peer_report_splits_the_gain_into_same_settings_and_autopilot() -> None:
    peer = _peer({PEER: [1.0, 1.1, 0.9], SAME: [1.5, 1.6, 1.4], AUTO: [3.0, 3.3, 2.8]})
    rep = build_peer_report([peer], dict(CPU), "cmd", max_spread=0.2)
    json.dumps(rep)
    p = rep["peers"][0]
    assert p["same_settings"]["ratio"] == pytest.approx(1.5) and p["same_settings"]["verdict"] == "faster"
    assert p["same_settings"]["spread"]["low"] == pytest.approx(1.4545, abs=1e-3)  # paired: 1.6 / 1.1
    assert p["autopilot"]["ratio"] == pytest.approx(2.0) and p["total"]["ratio"] == pytest.approx(3.0)
    assert p["parameters_equal"] is True
    assert [r["key"] for r in p["rows"]] == [PEER, SAME, AUTO] and p["rows"][0]["loss"] == 3.0
    # the rows as the ladder report's runs, ratios to the peer, so the PNG draws them as it draws the ladder
    assert [r["speedup_vs_baseline"] for r in rep["runs"]] == pytest.approx([1.0, 1.5, 3.0])
    assert rep["runs"][0]["verdict"] == "reference" and rep["runs"][1]["verdict"] == "faster"
    text = peers_markdown(rep)
    assert "1.50x (1.45-1.56) faster" in text and "3.0000 (loss)" in text
    assert "supplied by the bench: torchaudio shim" in text and "peer command" in text


def test_peer_report_calls_disagreeing_passes_inconclusive_and_keeps_failures() -> None:
    peer = _peer({PEER: [1.0, 1.2, 0.8], SAME: [1.1, 0.9, 1.0], AUTO: [None, None, None]})
    peer.rows[2].error = "failed: boom"
    rep = build_peer_report([peer], dict(CPU))
    p = rep["peers"][0]
    assert p["same_settings"]["verdict"] == "inconclusive"
    assert p["autopilot"] is None and p["total"] is None
    text = peers_markdown(rep)
    assert "inconclusive" in text and "failed: boom" in text and "autopilot (the recipe's settings" in text
    assert len(rep["runs"]) == 2


def test_peer_report_flags_unequal_models_and_a_loaded_host() -> None:
    peer = _peer({PEER: [1.0, 1.0], SAME: [1.2, 1.2]})
    assert peer.rows[1].result is not None
    peer.rows[1].result.trained_parameters = 1258
    peer.rows[1].result.host_load = 6.0
    rep = build_peer_report([peer], dict(CPU))
    assert rep["peers"][0]["parameters_equal"] is False
    text = peers_markdown(rep)
    assert "different parameter counts** (1,000 to 1,258, a difference of 258" in text
    assert any(n.startswith("other processes loaded the machine") for n in rep["notes"])


def test_peer_report_is_drawn_per_peer_and_with_the_ladder_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from speechtrain.bench.peers import write_peers_plot
    from speechtrain.bench.report import write_plot

    failed = _peer({PEER: [None], SAME: [None]})
    rep = build_peer_report([_peer({PEER: [1.0, 1.1], SAME: [1.2, 1.3], AUTO: [2.0, 2.1]}), failed], dict(CPU))
    assert write_peers_plot(rep, tmp_path / "peers.png").read_bytes()[:4] == b"\x89PNG"
    assert write_plot(rep, tmp_path / "ladder.png").read_bytes()[:4] == b"\x89PNG"


# -- the meter inside the peers' loops ------------------------------------------------------------------------


def test_meter_times_only_the_steps_after_warmup_and_stops_the_loop(tmp_path: Path) -> None:
    from meter import StepMeter, StopPeer

    meter = StepMeter("peer", steps=3, warmup=2, losses_last=2, hop_length=100)
    done = 0
    with pytest.raises(StopPeer):
        for i in range(10):
            meter.batch([1000, 600], sample_rate=1000)  # 1.6 s of audio, padded to 10 frames x 2
            meter.step_done({"loss": torch.tensor(float(i))})
            done += 1
    assert done == 4  # the fifth step raised
    rec = meter.result(precision="fp32")
    assert rec["steps"] == 3 and rec["samples"] == 6
    assert rec["audio_seconds"] == pytest.approx(4.8)
    assert rec["padded_frames"] == 60 and rec["real_frames"] == 48
    assert rec["losses"] == {"loss": pytest.approx(3.5)}  # the last two steps: 3 and 4
    assert RunResult.from_raw(rec).padding_fraction == pytest.approx(0.2)
    short = StepMeter("peer", steps=5, warmup=0, losses_last=1, hop_length=100)
    with pytest.raises(RuntimeError, match="before the timed window"):
        short.write(tmp_path / "out.json")


# -- the torchaudio shim ------------------------------------------------------------------------------------


def test_torchaudio_shim_mel_load_and_resample(tmp_path: Path) -> None:
    librosa = need("librosa")
    import importlib.util

    import soundfile as sf

    spec = importlib.util.spec_from_file_location("torchaudio_shim", PEERS_DIR / "shims" / "torchaudio" / "__init__.py")
    assert spec is not None and spec.loader is not None
    ta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ta)

    rng = np.random.default_rng(0)
    audio = rng.standard_normal(22050).astype(np.float32) * 0.1
    mel = ta.transforms.MelSpectrogram(
        sample_rate=22050, n_fft=1024, hop_length=256, win_length=1024, n_mels=80, f_min=0, f_max=8000, norm="slaney"
    )
    ours = mel(torch.from_numpy(audio)[None, None]).numpy()[0, 0]  # (n_mels, T)
    ref = librosa.feature.melspectrogram(
        y=audio,
        sr=22050,
        n_fft=1024,
        hop_length=256,
        n_mels=80,
        fmin=0,
        fmax=8000,
        htk=True,
        norm="slaney",
        pad_mode="reflect",
        power=2.0,
    )
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-3 * np.abs(ref).max()
    with pytest.raises(NotImplementedError):
        ta.transforms.MelSpectrogram(sample_rate=22050, n_fft=1024, mel_scale="slaney")
    x = torch.ones(1, 10)
    assert ta.functional.resample(x, 22050, 22050) is x
    with pytest.raises(NotImplementedError, match="not supplied"):
        ta.functional.resample(x, 44100, 22050)
    sf.write(tmp_path / "a.wav", audio, 22050)
    wav, rate = ta.load(tmp_path / "a.wav")
    assert rate == 22050 and tuple(wav.shape) == (1, 22050)


def test_torchaudio_shim_mel_holds_torchaudios_buffers_so_coquis_speaker_encoder_loads_strictly() -> None:
    """torchaudio's MelSpectrogram keeps ``spectrogram.window`` and ``mel_scale.fb`` in its state dict, and so
    does Coqui's XTTS model.pth for its speaker encoder: a shim without them made Coqui's strict load fail on a
    folder that was right (two unexpected keys)."""
    import importlib.util

    from speechtrain.models.xtts.hifigan import ResNetSpeakerEncoder

    spec = importlib.util.spec_from_file_location("torchaudio_shim", PEERS_DIR / "shims" / "torchaudio" / "__init__.py")
    assert spec is not None and spec.loader is not None
    ta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ta)
    # Coqui's speaker encoder: torchaudio.transforms.MelSpectrogram(16 kHz, n_fft 512, win 400, hop 160, 64 mels,
    # hamming window), the second module of its torch_spec
    mel = ta.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=512, win_length=400, hop_length=160, window_fn=torch.hamming_window, n_mels=64
    )
    theirs = ResNetSpeakerEncoder().torch_spec[1]  # ours, in Coqui's layout
    ours = theirs.state_dict()
    assert {k: tuple(v.shape) for k, v in mel.state_dict().items()} == {k: tuple(v.shape) for k, v in ours.items()}
    mel.load_state_dict({k: v * 2 for k, v in ours.items()}, strict=True)  # loaded, and used: window x2 -> power
    audio = torch.randn(1, 16000) * 0.1  # x4, filters x2
    assert torch.allclose(mel(audio), theirs(audio) * 8, rtol=1e-4)


# -- the settings both sides share ----------------------------------------------------------------------------


def _ctx(key: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "corpus": str(tmp_path / "corpus"),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "source": str(tmp_path / "src"),
        "work": str(tmp_path),
        "mas_source": str(tmp_path / "core.pyx"),
    }


@pytest.mark.parametrize("key", ["xtts", "vits", "nsf", "hifigan"])
def test_our_rows_are_valid_configs_at_the_peers_settings(key: str, tmp_path: Path) -> None:
    """Both of our rows load as configs; at the peer's settings everything speechtrain would add is off (fp32,
    fixed-count batches), the autopilot buckets; batch, learning rate and the model's sizes are the peer's."""
    import importlib

    from speechtrain.config import build_config

    defn = importlib.import_module(f"peer_{key}").DEFINITION
    ctx = _ctx(key, tmp_path)
    peer = defn.peer_raw(ctx)
    same = build_config(defn.ours_raw(ctx, False, {}))
    auto = build_config(defn.ours_raw(ctx, True, {"accel.cpu_allocator": True}))
    assert same.accel.precision == "fp32" and same.data.bucketing is False
    assert auto.accel.cpu_allocator is True
    assert same.data.manifest == ctx["corpus"]
    if key == "xtts":
        assert same.data.batch_size == peer["batch_size"] == 8 and same.optim.lr == peer["lr"]
        assert list(same.optim.betas) == peer["betas"] and same.model.checkpoint_dir == peer["checkpoint_dir"]
        assert auto.data.bucketing is True and auto.data.max_batch_size == 8
    elif key == "nsf":
        c = peer["config"]
        assert same.data.batch_size == c["batch_size"] and same.data.crop_frames == c["crop_mel_frames"]
        assert same.model.upsample_rates == c["model_args"]["upsample_rates"]
        assert same.model.resblock_dilation_sizes == c["model_args"]["resblock_dilation_sizes"]
        assert same.model.periods == c["model_args"]["discriminator_periods"]
        assert same.optim.lr == c["generater_optimizer_args"]["lr"] == c["discriminate_optimizer_args"]["lr"]
        assert same.data.num_workers == c["ds_workers"]
    elif key == "hifigan":  # jik876's config_v1.json keys; their discriminators (hard-coded) at full width
        h = peer["config"]
        assert same.data.batch_size == h["batch_size"] and same.data.crop_frames * h["hop_size"] == h["segment_size"]
        assert same.model.upsample_initial_channel == h["upsample_initial_channel"] == 32
        assert same.model.resblock_dilation_sizes == h["resblock_dilation_sizes"]
        assert same.model.periods == [2, 3, 5, 7, 11] and same.model.disc_width == 1.0
        assert same.model.scale_discriminator == "msd" and same.model.msd_scales == 3
        assert same.optim.lr == h["learning_rate"] and list(same.optim.betas) == [h["adam_b1"], h["adam_b2"]]
        assert same.optim.weight_decay == 0.01  # torch's AdamW default, which their train.py keeps
        assert same.optim.scheduler == "exponential" and same.optim.gamma == h["lr_decay"]
        assert same.data.num_workers == h["num_workers"] and same.model.fmax_for_loss is h["fmax_for_loss"] is None
        assert (same.data.fmin, same.data.fmax, same.data.n_mels) == (h["fmin"], h["fmax"], h["num_mels"])
        assert auto.data.bucketing is True
    else:
        m = peer["model"]
        assert same.data.batch_size == m["batch_size"] and same.model.segment_size == m["segment_size"]
        assert same.model.hidden_channels == m["hidden_channels"] and same.model.resblock == m["resblock"]
        assert same.model.n_vocab == m["num_symbols"] and same.optim.lr == m["learning_rate"] == m["learning_rate_d"]
        assert auto.data.bucketing is True


def test_vits_tiny_builds_pipers_network_on_both_sides_in_the_corpus_language(tmp_path: Path) -> None:
    """``--size tiny --language uz``: Piper's row gets the tiny sizes, the short slices and the uz espeak-ng voice;
    ours the same sizes, Piper's hard-coded parts and data.language; and the two networks are equal part for part
    (Piper's SynthesizerTrn and MultiPeriodDiscriminator built from the peer row's settings) but for the decoder's
    known extra weight norm and bias (flagged in the table)."""
    import peer_vits

    from speechtrain.config import build_config
    from speechtrain.registry import build_task

    models = need("piper.train.vits.models", extra="dev")
    ctx = {**_ctx("vits", tmp_path), "language": "uz", "espeak_voice": "uz", "size": "tiny", "held_out": []}
    peer = peer_vits.peer_raw(ctx)
    m = peer["model"]
    assert peer["data"]["espeak_voice"] == "uz" and m["hidden_channels"] == 32 and m["segment_size"] == 2048
    cfg = build_config(peer_vits.ours_raw(ctx, False, {}))
    assert cfg.data.language == "uz" and cfg.model.segment_size == 2048 and cfg.model.hidden_channels == 32
    assert build_config(peer_vits.ours_raw(ctx, True, {})).model.hidden_channels == 32
    theirs = models.SynthesizerTrn(
        n_vocab=m["num_symbols"],
        spec_channels=m["filter_length"] // 2 + 1,
        segment_size=m["segment_size"] // m["hop_length"],
        **{k: m[k] for k in ("inter_channels", "hidden_channels", "filter_channels", "n_heads", "n_layers")},
        **{k: m[k] for k in ("kernel_size", "p_dropout", "resblock", "resblock_kernel_sizes")},
        **{k: m[k] for k in ("resblock_dilation_sizes", "upsample_rates", "upsample_initial_channel")},
        upsample_kernel_sizes=m["upsample_kernel_sizes"],
        n_speakers=1,
        gin_channels=0,
        use_sdp=m["use_sdp"],
    )
    task = build_task(cfg.model, cfg.data)

    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    for part in ("enc_p", "enc_q", "flow", "dp"):
        assert count(getattr(task.generator, part)) == count(getattr(theirs, part)), part
    # the decoder: weight norm on conv_pre (32 gains) and conv_post (1); conv_post has no bias on either side
    assert count(task.generator.dec) - count(theirs.dec) == 32 + 1
    assert count(task.discriminator) == count(models.MultiPeriodDiscriminator())


def test_speech_corpus_with_a_language_is_make_datasets_espeak_corpus(tmp_path: Path) -> None:
    """``--language uz --utterances 3``: the corpus is espeak-ng's reading of the built-in Uzbek sentences (22050 Hz
    16-bit PCM, LJSpeech layout, as make-dataset --language writes it), written once; without it, the demo corpus."""
    import soundfile as sf
    from common import PeerOptions, speech_corpus

    from speechtrain.data.speak import corpus_sentences

    folder, words = speech_corpus(tmp_path, PeerOptions(language="uz", utterances=3), 40)
    rows = (folder / "metadata.csv").read_text(encoding="utf-8").splitlines()
    assert [r.split("|")[-1] for r in rows] == corpus_sentences("uz", 3, 0)
    info = sf.info(str(folder / "wavs" / f"{rows[0].split('|')[0]}.wav"))
    assert (info.samplerate, info.subtype) == (22050, "PCM_16")
    assert "'uz' spoken by espeak-ng" in words and "--language uz -n 3" in words
    stamp = (folder / "metadata.csv").stat().st_mtime_ns
    assert speech_corpus(tmp_path, PeerOptions(language="uz", utterances=3), 40)[0] == folder
    assert (folder / "metadata.csv").stat().st_mtime_ns == stamp  # kept, not written again
    demo, words = speech_corpus(tmp_path, PeerOptions(utterances=2), 40, demo_folder="corpus_en")
    assert demo.name == "corpus_en_2" and "English demo" in words
    assert len((demo / "metadata.csv").read_text().splitlines()) == 2


def test_options_a_peer_does_not_take_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--language for the singing or XTTS peer, --size for HiFi-GAN: refused with the peers that take it, before
    the peers' environment is even looked for (exit 2, no traceback)."""
    from common import PeerOptions
    from run import main, refused_options

    assert refused_options(["hifigan", "vits"], PeerOptions(language="uz", utterances=40)) is None
    assert refused_options(["vits"], PeerOptions(size="tiny")) is None
    why = refused_options(["nsf"], PeerOptions(language="uz")) or ""
    assert "--language" in why and "nsf" in why and "--peer vits --peer hifigan" in why
    assert "--size" in (refused_options(["hifigan"], PeerOptions(size="tiny")) or "")
    import logging

    logger = logging.getLogger("speechtrain")
    before = (logger.propagate, list(logger.handlers))
    assert main(["--language", "uz", "--home", str(tmp_path / "nowhere")]) == 2  # all four peers: xtts takes none
    assert (logger.propagate, list(logger.handlers)) == before  # the caller's logging as it was
    err = capsys.readouterr().err
    assert "--language" in err and "xtts" in err and "Traceback" not in err and "--install" not in err


def test_peers_needing_source_code_say_so_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import peer_hifigan
    import peer_nsf
    import peer_vits
    from run import PEERS

    monkeypatch.delenv(peer_nsf.ENV, raising=False)
    monkeypatch.delenv(peer_vits.ENV, raising=False)
    monkeypatch.delenv(peer_hifigan.ENV, raising=False)
    assert "--singingvocoders DIR" in (peer_nsf.needs() or "")
    assert "--piper-source DIR" in (peer_vits.needs() or "")
    assert "--jik876 DIR" in (peer_hifigan.needs() or "")
    monkeypatch.setenv(peer_nsf.ENV, "/nonexistent/sv")
    assert "no such folder" in (peer_nsf.needs() or "")
    monkeypatch.setenv(peer_hifigan.ENV, "/nonexistent/hifi-gan")
    assert "no such folder" in (peer_hifigan.needs() or "")
    assert "hifigan" in PEERS and peer_hifigan.DEFINITION.runner == "jik876_hifigan.py"
    assert (PEERS_DIR / peer_hifigan.DEFINITION.runner).is_file()


# -- the command line ----------------------------------------------------------------------------------------


def test_bench_peers_runs_the_checkouts_script_with_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from speechtrain.cli import cmd_bench
    from speechtrain.cli.main import main

    calls: list[list[str]] = []

    class Done:
        returncode = 0

    monkeypatch.setattr(subprocess, "run", lambda cmd, *a, **k: calls.append(cmd) or Done())
    assert main(["bench", "--peers", "--peer", "xtts", "--repeat", "3"]) == 0
    assert calls[0][1:] == [str(PEERS_DIR / "run.py"), "--peer", "xtts", "--repeat", "3"]
    monkeypatch.setattr(cmd_bench, "peers_script", lambda: Path("/nonexistent/bench/peers/run.py"))
    assert main(["bench", "--peers"]) == 2  # a UserError: one line, exit 2


def test_profile_summary_ranks_operators_by_self_time_and_the_table_lists_them() -> None:
    from speechtrain.bench.measure import profile_summary, profiler

    a = torch.randn(64, 64)
    with profiler(3) as prof:
        for _ in range(3):
            (a @ a).relu().sum()
    ops = profile_summary(prof, 3)
    assert 1 <= len(ops) <= 3 and all(0.0 <= o["share"] <= 1.0 and o["calls"] >= 1 for o in ops)
    assert [o["self_seconds"] for o in ops] == sorted((o["self_seconds"] for o in ops), reverse=True)
    peer = _peer({PEER: [1.0], SAME: [1.2]})
    peer.profiles = {PEER: [{"op": "aten::conv1d", "self_seconds": 1.0, "share": 0.5, "calls": 3}]}
    text = peers_markdown(build_peer_report([peer], dict(CPU)))
    assert "Where the time goes" in text and "their trainer: aten::conv1d 50%" in text
