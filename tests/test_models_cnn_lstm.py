"""CNN-LSTM classifier: padding invariance, losses, eval accuracy + confusion, labels, classify, training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from speechtrain.config import ConfigError, load_config
from speechtrain.data.batch import Batch
from speechtrain.errors import DataError
from speechtrain.recipes import build_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
LABELS = "model.labels=[clicks,hiss,hum,whistle]"
SMALL = ["model.name=cnn_lstm", LABELS, "model.conv_channels=[4,8]", "model.pool_time=[2,2]", "model.lstm_hidden=8"]


def small_task(*extra: str):  # noqa: ANN201
    torch.manual_seed(0)
    return build_task(load_config(None, [*SMALL, *extra]))


def mel_batch(lengths: list[int], labels: list[int]) -> Batch:
    torch.manual_seed(1)
    t = max(lengths)
    mel = torch.randn(len(lengths), 80, t)
    for i, n in enumerate(lengths):
        mel[i, :, n:] = -11.5  # padding (the collate's log floor)
    tensors = {"mel": mel, "mel_lengths": torch.tensor(lengths), "labels": torch.tensor(labels)}
    return Batch(tensors, [f"u{i}" for i in range(len(lengths))], 256, 22050)


def test_padding_and_splits_do_not_change_logits() -> None:
    task = small_task()
    task.model.eval()
    batch = mel_batch([37, 12, 5, 29], [0, 1, 2, 3])
    with torch.no_grad():
        full = task._logits(batch)
        halves = torch.cat([task._logits(b) for b in batch.split(2)])
        singles = torch.cat([task._logits(batch.select([i])) for i in range(batch.size)])
        task.model.to(memory_format=torch.channels_last)
        cl = task._logits(batch)
    assert full.shape == (4, 4)
    assert torch.allclose(full, halves, atol=1e-5) and torch.allclose(full, singles, atol=1e-5)
    assert torch.allclose(full, cl, atol=1e-5)


def test_training_step_ignores_unlabelled_items_and_learns() -> None:
    task = small_task("model.dropout=0.0")
    batch = mel_batch([30, 30, 20, 25], [0, 1, -1, 3])
    out = task.training_step(batch, "main", {})
    assert set(out) == {"loss", "accuracy"} and torch.isfinite(out["loss"])
    opt = torch.optim.Adam(task.model.parameters(), 1e-2)
    first = float(out["loss"].detach())
    for _ in range(30):
        opt.zero_grad()
        loss = task.training_step(batch, "main", {})["loss"]
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.5 * first


def test_eval_summary_accuracy_and_confusion() -> None:
    task = small_task()
    task.model.eval()
    batches = [mel_batch([20, 16, 9], [0, 1, 2]), mel_batch([18, 21], [3, 3])]
    outputs = []
    preds = []
    for b in batches:
        m = task.eval_step(b)
        outputs.append((task.batch_weight(b), {k: float(v) for k, v in m.items()}))
        preds += task._logits(b).argmax(-1).tolist()
    summary = task.eval_summary(outputs)
    truth = [0, 1, 2, 3, 3]
    expected = np.zeros((4, 4), int)
    for t, p in zip(truth, preds):
        expected[t, p] += 1
    assert summary["confusion"] == expected.tolist()
    assert summary["accuracy"] == pytest.approx(np.trace(expected) / 5)
    assert summary["labels"] == ["clicks", "hiss", "hum", "whistle"] and summary["items"] == 5
    assert task.headline_metric == "accuracy" and task.headline_mode == "max"


def _write_folder(root: Path, labels: list[str]) -> Path:
    for label in labels:
        (root / label).mkdir(parents=True)
        sf.write(str(root / label / "a.wav"), np.zeros(2205, np.float32), 22050)
    return root


def test_labels_come_from_the_manifest_and_are_checked(tmp_path: Path) -> None:
    root = _write_folder(tmp_path / "data", ["yes", "no", "maybe"])
    cfg = load_config(None, ["model.name=cnn_lstm", f"data.manifest={root}"])
    task = build_task(cfg)
    assert cfg.model.labels == ["maybe", "no", "yes"] == task.labels  # sorted, written into the config

    from speechtrain.data.dataset import SpeechDataset

    class Prepared(SpeechDataset):
        def __init__(self, labels: list[str]) -> None:
            self.labels = labels

    with pytest.raises(DataError, match="differ"):
        task.setup(Prepared(["maybe", "yes"]))
    task.setup(Prepared(["maybe", "no", "yes"]))

    class Synthetic:  # estimates and benchmarks: names do not matter, the head must fit
        labels = ["class0", "class1"]

    task.setup(Synthetic())
    Synthetic.labels = ["a", "b", "c", "d"]
    with pytest.raises(DataError, match="4 labels"):
        task.setup(Synthetic())
    one = _write_folder(tmp_path / "one", ["only"])
    with pytest.raises(DataError, match="at least two"):
        build_task(load_config(None, ["model.name=cnn_lstm", f"data.manifest={one}"]))
    with pytest.raises(ConfigError, match="pool_time"):
        load_config(None, ["model.name=cnn_lstm", "model.pool_time=[2]"])
    with pytest.raises(ConfigError, match="odd"):
        load_config(None, ["model.name=cnn_lstm", "model.kernel_size=4"])


def test_classify_array_and_path(tmp_path: Path) -> None:
    task = small_task()
    wav = (0.1 * np.sin(np.arange(11025) * 0.3)).astype(np.float32)
    label, probs = task.classify(wav)
    assert label in task.labels and set(probs) == set(task.labels)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5) and probs[label] == max(probs.values())
    path = tmp_path / "clip.wav"
    sf.write(str(path), wav, 22050)
    assert task.classify(path)[0] == label
    sf.write(str(tmp_path / "clip16.wav"), wav[::2], 11025)  # another rate is resampled
    assert task.classify(tmp_path / "clip16.wav")[0] in task.labels
    with pytest.raises(DataError):
        task.classify(tmp_path / "missing.wav")


def test_recipes_load() -> None:
    full = load_config(RECIPES / "classifier_cnn_lstm.yaml", [LABELS])
    d = full.data
    loader = (d.batch_size, d.num_workers, d.prefetch_factor, d.persistent_workers, d.pin_memory)
    assert loader == (64, 8, 6, True, True)
    assert full.accel.precision == "auto" and d.noise_snr_db is not None and d.time_masks and d.freq_masks
    tiny = load_config(RECIPES / "classifier_cnn_lstm_tiny.yaml", [LABELS])
    assert tiny.data.num_workers == 0 and tiny.model.name == "cnn_lstm"


@pytest.mark.slow
def test_tiny_recipe_trains_and_classifies(demo_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from speechtrain.cli.main import main
    from speechtrain.recipes.train import train_from_config

    cfg = load_config(
        RECIPES / "classifier_cnn_lstm_tiny.yaml",
        [
            f"data.manifest={demo_corpus / 'classes'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.output_dir={tmp_path / 'run'}",
            "train.max_steps=20",
            "train.eval_every=10",
            "train.save_every=10",
        ],
    )
    run_dir, summary = train_from_config(cfg)
    assert summary["steps"] == 20 and (run_dir / "best.pt").is_file()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["split"] == "eval"]
    assert evals and evals[-1]["labels"] == ["clicks", "hiss", "hum", "whistle"]
    assert evals[-1]["accuracy"] >= 0.6  # chance is 0.25 with four classes
    assert sum(map(sum, evals[-1]["confusion"])) == evals[-1]["items"] > 0

    files = [str(sorted((demo_corpus / "classes" / c).glob("*.wav"))[-1]) for c in ("clicks", "hiss", "hum", "whistle")]
    capsys.readouterr()
    assert main(["classify", str(run_dir), *files, "--json", "--device", "cpu"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["file"] for r in results] == files
    correct = sum(Path(r["file"]).parent.name == r["label"] for r in results)
    assert correct >= 3, results
    assert main(["classify", str(run_dir), files[0]]) == 0
    assert Path(files[0]).parent.name in capsys.readouterr().out
    assert main(["classify", str(run_dir), str(tmp_path / "missing.wav")]) == 2


@pytest.mark.gpu
def test_amp_channels_last_on_cuda() -> None:
    """cuDNN LSTM on packed sequences under fp16 autocast with a channels-last conv front end."""
    task = small_task()
    task.model.cuda().eval().to(memory_format=torch.channels_last)
    batch = mel_batch([37, 12, 5, 29], [0, 1, 2, 3]).to("cuda")
    with torch.no_grad():
        ref = task._logits(batch).float()
        with torch.autocast("cuda", dtype=torch.float16):
            amp = task._logits(batch).float()
            halves = torch.cat([task._logits(b).float() for b in batch.split(2)])
    assert torch.isfinite(amp).all()
    assert torch.allclose(amp, ref, atol=5e-2) and torch.allclose(halves, amp, atol=5e-2)
    task.model.train()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = task.training_step(batch, "main", {})["loss"]
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in task.model.parameters() if p.grad is not None)
