"""XTTS's DVAE codes cached by ``prepare`` (a derived feature): the same numbers as the on-device path, computed
once, recomputed when and only when their inputs change, and a clear error for weights that do not load."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("tokenizers")

from speechtrain.config import load_config  # noqa: E402
from speechtrain.data.batch import Batch  # noqa: E402
from speechtrain.data.demo import make_demo_corpus  # noqa: E402
from speechtrain.recipes.data import DataRecipe  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "xtts_finetune_tiny.yaml"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_demo_corpus(tmp_path_factory.mktemp("xtts_codes") / "demo", utterances=5, seed=3)
    for i, wav in enumerate(sorted((root / "wavs").glob("*.wav"))):  # 1.0 to 2.0 s: padding in every batch
        data, sr = sf.read(wav, dtype="int16")
        sf.write(wav, data[: int((1.0 + 0.25 * i) * sr)], sr, subtype="PCM_16")
    return root


def _cfg(corpus: Path, tmp: Path, *extra: str):  # noqa: ANN202
    return load_config(
        str(RECIPE),
        [
            f"data.manifest={corpus}",
            f"data.cache_dir={tmp / 'cache'}",
            f"model.checkpoint_dir={tmp / 'base'}",
            "data.eval_utterances=1",
            *extra,
        ],
    )


def _files(cache: Path, suffix: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (cache / "features").glob(f"*/*.{suffix}.npy")}


def _without_codes(batch: Batch) -> Batch:
    return dataclasses.replace(
        batch,
        tensors={k: v for k, v in batch.tensors.items() if not k.startswith("codes")},
        host_lengths={k: v for k, v in batch.host_lengths.items() if not k.startswith("codes")},
    )


def test_prepared_codes_equal_the_device_path_bit_for_bit(corpus: Path, tmp_path: Path) -> None:
    """prepare (CPU, fp32, each utterance alone) writes the codes the task would compute on the device; a
    padded batch (pad_multiple 8) brings them, and the training step gives the same loss either way."""
    from speechtrain.models.xtts.task import XttsTask

    cfg = _cfg(corpus, tmp_path, "data.pad_multiple=8")
    recipe = DataRecipe(cfg)
    report = recipe.prepare(workers=1, progress=False)
    assert [(d.name, d.computed, d.reused) for d in report.derived] == [("codes", 5, 0)]
    assert "codes     DVAE codes: reused 0, computed 5" in report.summary()
    assert report.to_dict()["cache"]["derived"]["codes"]["computed"] == 5

    task = XttsTask(cfg.model, cfg.data)
    needs = task.needs()
    assert needs.derived == ("codes",) and recipe.fields(needs)[-1] == "codes"
    ds = recipe.dataset("train", recipe.fields(needs))
    assert ds[0]["codes"].dtype == np.int16
    batch = recipe.batch_reader(ds, needs)(tuple(range(len(ds))), True, 0)
    assert "codes" in batch and batch["codes"].shape[1] % 8 == 0  # padded to pad_multiple; the task trims
    cached, on_device = task.batch_codes(batch), task.dvae_codes(_without_codes(batch))
    assert cached.dtype == on_device.dtype == torch.long
    assert torch.equal(cached, on_device)
    for i, n in enumerate(batch.host_lengths["audio_lengths"]):  # and each equals its utterance alone
        alone = task.mods.dvae.codes(task.mels.dvae(batch["audio"][i : i + 1, :, :n], task.mods.coqui.mel_norms))[0]
        assert torch.equal(cached[i, : alone.numel()], alone) and not cached[i, alone.numel() :].any()

    losses = []
    for b in (batch, _without_codes(batch)):
        torch.manual_seed(0)  # the conditioning clips are drawn from torch's RNG
        losses.append(task.training_step(b, "main", {})["loss"].item())
    assert losses[0] == losses[1]


def test_prepare_again_computes_nothing_and_new_dvae_weights_recompute_codes_only(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import speechtrain.models.xtts.codes as codes

    loads: list[Path] = []
    real = codes.CodesOfAudio
    monkeypatch.setattr(codes, "CodesOfAudio", lambda folder, arch: loads.append(folder) or real(folder, arch))
    cfg = _cfg(corpus, tmp_path)
    cache = tmp_path / "cache"
    first = DataRecipe(cfg).prepare(workers=1, progress=False)
    assert (first.computed, first.derived[0].computed, len(loads)) == (5, 5, 1)
    mels, audio, cached = _files(cache, "mel"), _files(cache, "audio"), _files(cache, "codes")
    assert len(cached) == 5

    assert DataRecipe(cfg).ensure_prepared() is None  # fresh: nothing to do
    again = DataRecipe(cfg).prepare(workers=1, progress=False)
    assert (again.computed, again.derived[0].computed, again.derived[0].reused) == (0, 0, 5)
    assert len(loads) == 1  # the DVAE was not even loaded
    assert _files(cache, "mel") == mels and _files(cache, "audio") == audio and _files(cache, "codes") == cached

    dvae_pth = tmp_path / "base" / "dvae.pth"
    state = torch.load(dvae_pth, weights_only=True)
    sd = state["model"] if "model" in state else state
    key = next(k for k in sd if k.startswith("encoder.") and k.endswith("weight"))
    sd[key] = sd[key] * 1.5  # new DVAE weights
    torch.save(state, dvae_pth)
    changed = DataRecipe(cfg).ensure_prepared()
    assert changed is not None and "DVAE codes: reused 0, computed 5" in changed.summary()
    assert (changed.computed, changed.reused, changed.derived[0].computed) == (0, 5, 5) and len(loads) == 2
    assert _files(cache, "mel") == mels and _files(cache, "audio") == audio  # mels and audio untouched
    now = _files(cache, "codes")
    assert len(now) == 10 and all(now[p] == t for p, t in cached.items())  # the old variant's codes are kept


def test_codes_are_not_cached_where_the_task_sees_other_audio(corpus: Path, tmp_path: Path) -> None:
    """With noise or crops the stored audio is not what the task sees; with model.cache_codes=false the padded
    batch goes through the DVAE, as Coqui's trainer does: prepare computes no codes then, and the task asks
    for none."""
    from speechtrain.models.xtts.task import XttsTask

    for extra in ("data.noise_snr_db=20", "data.crop_frames=64", "model.cache_codes=false"):
        cfg = _cfg(corpus, tmp_path, extra)
        recipe = DataRecipe(cfg)
        assert recipe.derived() == [], extra
        report = recipe.prepare(workers=1, progress=False)
        assert report.derived == [] and "DVAE codes" not in report.summary()
        task = XttsTask(cfg.model, cfg.data)
        assert task.needs().derived == () and not task.cache_codes
        assert "codes" not in recipe.fields(task.needs())
    assert not _files(tmp_path / "cache", "codes")


def test_a_dvae_pth_that_does_not_load_is_a_clear_error(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from speechtrain.cli.main import main
    from speechtrain.models.xtts.build import write_random_checkpoint

    base = write_random_checkpoint(tmp_path / "base", "tiny", seed=0)
    (base / "dvae.pth").write_bytes(b"not a torch file")
    args = ["prepare", str(corpus), "--config", str(RECIPE), "--no-progress"]
    overrides = [f"data.cache_dir={tmp_path / 'cache'}", f"model.checkpoint_dir={base}"]
    assert main([*args, *overrides]) == 2
    err = capsys.readouterr().err
    assert f"{base / 'dvae.pth'}: not a readable torch file" in err and "download them again" in err
    assert "Traceback" not in err

    torch.save({"model": {"encoder.0.0.weight": torch.zeros(3)}}, base / "dvae.pth")  # another model's file
    assert main([*args, *overrides]) == 2
    err = capsys.readouterr().err
    assert "is not the DVAE of" in err and "missing" in err and "Traceback" not in err


def test_one_codes_rule_at_prepare_and_on_the_device(corpus: Path, tmp_path: Path) -> None:
    """model.codes=utterance: each utterance's codes from its own audio wherever they are made, also when the
    batches bring none (noise: the stored audio is not what the task sees); padded_batch: Coqui's trainer, the
    padded batch through the DVAE, whose last codes of the shorter items see the padding (the trade-off)."""
    from speechtrain.models.xtts.task import XttsTask

    cfg = _cfg(corpus, tmp_path, "data.noise_snr_db=20")
    recipe = DataRecipe(cfg)
    recipe.prepare(workers=1, progress=False)
    task = XttsTask(cfg.model, cfg.data)
    needs = task.needs()
    ds = recipe.dataset("train", recipe.fields(needs))
    batch = recipe.batch_reader(ds, needs)(tuple(range(len(ds))), True, 0)
    assert "codes" not in batch and cfg.model.codes == "utterance"
    norms = task.mods.coqui.mel_norms
    lengths = batch.host_lengths["audio_lengths"]
    alone = [
        task.mods.dvae.codes(task.mels.dvae(batch["audio"][i : i + 1, :, :n], norms))[0] for i, n in enumerate(lengths)
    ]
    codes = task.dvae_codes(batch)
    for i, own in enumerate(alone):
        assert torch.equal(codes[i, : own.numel()], own) and not codes[i, own.numel() :].any()
    assert task._codes == {}  # noisy audio changes every step: nothing kept

    coqui_cfg = _cfg(corpus, tmp_path, "data.noise_snr_db=20", "model.codes=padded_batch")
    coqui = XttsTask(coqui_cfg.model, coqui_cfg.data)
    padded = coqui.dvae_codes(batch)
    assert torch.equal(padded, task.mods.dvae.codes(task.mels.dvae(batch["audio"], norms)))
    differ = [int((padded[i, : own.numel()] != own).sum()) for i, own in enumerate(alone)]
    longest = max(range(len(lengths)), key=lambda i: lengths[i])
    assert differ[longest] == 0 and sum(differ) > 0  # only the shorter items' codes see the padding
    for i, own in enumerate(alone):  # and only at their end
        assert torch.equal(padded[i, : own.numel() - 3], own[:-3]), i


def test_codes_settings() -> None:
    from speechtrain.models.xtts.config import XttsConfig

    assert XttsConfig().codes == "utterance" and XttsConfig().stores_codes
    older = XttsConfig.model_validate({"cache_codes": False})  # what cache_codes=false meant before
    assert older.codes == "padded_batch" and not older.stores_codes
    assert not XttsConfig(codes="utterance", cache_codes=False).stores_codes  # per utterance, on the device
    coqui = XttsConfig(codes="padded_batch")
    assert not coqui.cache_codes and not coqui.stores_codes  # a padded batch's codes are never cached
    assert XttsConfig.model_validate(coqui.model_dump()) == coqui  # a run's config.yaml loads back
    assert XttsConfig.model_validate(XttsConfig().model_dump()).codes == "utterance"
