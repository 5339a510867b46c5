"""The web UI's data roots hold for a corpus whose feature cache is fresh: a job reads the cached items without
reading the manifest, so the check is made where the cache is opened for the job (FeatureStore.open_index), on the
items' audio. A run the CLI trained on audio outside the roots, resumed under the page's roots, is refused with one
line; the command line (no roots) resumes it as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechtrain.cli.main import main
from speechtrain.data.manifest import audio_roots
from speechtrain.errors import DataError

TOY = [
    "model.name=toy",
    "model.channels=16",
    "data.max_frames=2500",
    "train.eval_every=100",
    "train.save_every=2",
    "train.progress=false",
    "train.tensorboard=false",
    "train.device=cpu",
    "accel.precision=fp32",
]


def test_a_fresh_cache_of_audio_outside_the_roots_is_refused(demo_data: list[str], tmp_path: Path) -> None:
    from speechtrain.config import load_config
    from speechtrain.data.dataset import SpeechDataset
    from speechtrain.data.prepare import ensure_prepared

    data = load_config(None, [*demo_data, "data.eval_utterances=1"]).data
    ensure_prepared(data, progress=False)  # the command line: no roots
    assert len(SpeechDataset.from_config(data, "train")) > 0
    with audio_roots([tmp_path / "data"]):
        assert ensure_prepared(data, progress=False) is None  # fresh: nothing re-read
        with pytest.raises(DataError, match="feature cache holds .* outside the data roots"):
            SpeechDataset.from_config(data, "train")
    manifest = data.manifest
    assert manifest is not None
    with audio_roots([Path(manifest).parent]):  # the corpus's own folder is a root: read as before
        assert len(SpeechDataset.from_config(data, "train")) > 0


def test_resuming_a_cli_run_on_audio_outside_the_roots_is_refused(
    demo_data: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["train", *TOY, *demo_data, "train.max_steps=2", f"train.output_dir={run}"]) == 0
    capsys.readouterr()
    with audio_roots([tmp_path / "data", tmp_path / "uploads"]):  # what the page's job is told
        rc = main(["train", "--resume", str(run), "train.max_steps=4"])
    err = capsys.readouterr().err
    assert rc != 0
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "outside the data roots" in lines[0], err
    assert "Traceback" not in err
    assert main(["train", "--resume", str(run), "train.max_steps=4"]) == 0  # the command line
