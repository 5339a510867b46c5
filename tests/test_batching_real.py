"""The batching pipeline on a prepared demo corpus (the real SpeechDataset and feature cache)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from speechtrain.config import load_config
from speechtrain.data.demo import make_demo_corpus
from speechtrain.data.features import LogMel
from speechtrain.data.loader import build_train_loader, dataset_fields
from speechtrain.train.task import Needs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from speechtrain.data.prepare import prepare_dataset

    root = make_demo_corpus(tmp_path_factory.mktemp("batching") / "demo", utterances=12, seed=3)
    prepare_dataset(
        load_config(None, [f"data.manifest={root}", "data.eval_utterances=2"]).data, workers=1, progress=False
    )
    return root


def _cfg(root: Path, *extra: str):  # noqa: ANN202
    return load_config(None, [f"data.manifest={root}", "data.eval_utterances=2", *extra])


def _dataset(cfg, needs: Needs):  # noqa: ANN001, ANN202
    from speechtrain.data.dataset import SpeechDataset

    return SpeechDataset.from_config(cfg.data, "train", fields=dataset_fields(cfg.data, needs))


def test_real_dataset_epoch_covers_every_utterance(prepared: Path) -> None:
    cfg = _cfg(prepared, "data.max_frames=3000", "data.num_buckets=3")
    needs = Needs(mel=True, text=True)
    ds = _dataset(cfg, needs)
    loader = build_train_loader(cfg.data, ds, needs, seed=cfg.train.seed)
    batches = list(itertools.islice(iter(loader), len(loader)))
    assert sorted(i for b in batches for i in b.ids) == sorted(ds.ids)
    for b in batches:
        assert b["mel"].shape[1] == cfg.data.n_mels
        assert b.padded_frames <= 3000 or b.size == 1


def test_real_crops_line_up_with_their_audio(prepared: Path) -> None:
    cfg = _cfg(prepared, "data.crop_frames=32", "data.batch_size=4")
    needs = Needs(mel=True, audio=True)
    ds = _dataset(cfg, needs)
    batch = next(iter(build_train_loader(cfg.data, ds, needs, seed=cfg.train.seed)))
    assert batch["mel"].shape[-1] == 32 and batch["audio"].shape[-1] == 32 * cfg.data.hop_length
    recomputed = LogMel.from_config(cfg.data)(batch["audio"])  # (B, n_mels, 32)
    edge = cfg.data.n_fft // cfg.data.hop_length  # frames whose window crosses the crop's edge
    inner = slice(edge, 32 - edge)
    diff = (recomputed[..., inner] - batch["mel"][..., inner]).abs().mean().item()
    assert diff < 0.05, "mel crop and audio crop must be the same segment"
    shifted = (recomputed[..., inner] - batch["mel"][..., edge + 1 : 32 - edge + 1]).abs().mean().item()
    assert shifted > 5 * diff  # a one-frame misalignment would show


def test_plan_command_on_a_prepared_corpus(prepared: Path, tmp_path: Path) -> None:
    from speechtrain.cli.main import main

    out = tmp_path / "plan.json"
    assert main(["plan", str(prepared), "--json", str(out), "data.eval_utterances=2", "data.num_buckets=2"]) == 0
    report = json.loads(out.read_text())
    assert report["bucketed"]["utterances"] == report["random"]["utterances"] == 10
    assert np.isfinite(report["bucketed"]["padding_fraction"])
