"""Peer row: openvpi/SingingVocoders' own NSF-HiFiGAN task (``training.nsf_HiFigan_task.nsf_HiFigan``, Lightning),
trained by ``lightning.pytorch.Trainer`` built as their ``train.py`` builds it.

    PYTHON_OF_THE_PEER_ENV bench/peers/singing_nsf.py SPEC.json OUT.json

SPEC.json's ``raw``: ``source`` (a folder holding their code, read out of a git checkout by the orchestrator; never
part of this repository), ``corpus`` (wavs/), ``work`` (their binarized data goes there) and ``config``: keys of
their config (``configs/base_hifi.yaml`` and its base, read with their ``read_full_config``) to override: sizes,
features, batch, optimizer, precision. Their own preprocessing (``process.wav2spec``: their mel, Praat f0) writes
the ``.npz`` files and their train/valid index outside the timed window, as speechtrain's ``prepare`` does.
``held_out`` (wav paths) stay out of their train index; with the spec's ``quality_dir`` their generator resynthesises
each of them from their own features after the timed steps (``<id>.wav``: what the bench scores).

What the bench adds: a Lightning callback that counts each batch and stops after the timed steps, and a wrapper
of the task's ``_training_step`` that keeps its loss dict (it calls the original); torchaudio is the bench's shim
when no real one is installed (their NSF training path uses none of it: imports only).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from meter import StepMeter, StopPeer  # noqa: E402


def split_index(done: list[str], held_out: list[str]) -> tuple[list[str], list[str]]:
    """Their train and valid index: every binarized phrase but the held-out ones trains (``held_out``: the wavs
    the bench scores after training); the valid index (unused in the timed window) is the held-out ones."""
    held = {Path(h).stem for h in held_out}
    train = [d for d in done if Path(d).stem not in held]
    valid = [d for d in done if Path(d).stem in held] or train[:1]
    return train, valid


def binarize(config: dict[str, Any], corpus: Path, data_dir: Path, held_out: list[str]) -> None:
    """Their preprocessing, file by file (``process.wav2spec``, skipped where its file is there), and their index
    files (every phrase but the held-out ones trains)."""
    from process import wav2spec

    done = []
    data_dir.mkdir(parents=True, exist_ok=True)  # their process.py makes the folders before wav2spec
    for wav in sorted((corpus / "wavs").glob("*.wav")):
        out = data_dir / f"{wav.stem}.npz"
        if not out.is_file():
            ok, result = wav2spec(config, wav, out)
            if not ok:
                raise RuntimeError(f"SingingVocoders' wav2spec: {result}")
        done.append(str(out))
    train, valid = split_index(done, held_out)
    index = data_dir / "index"
    index.mkdir(parents=True, exist_ok=True)
    (index / "train").write_text("\n".join(train) + "\n")
    (index / "valid").write_text("\n".join(valid) + "\n")


def write_quality_audio(task: Any, config: dict[str, Any], data_dir: Path, held_out: list[str], folder: Path) -> None:
    """Their generator's resynthesis of each held-out recording from their own features of it (their
    ``wav2spec``: mel and Praat f0, as their inference reads them), fp32 in eval mode, as ``folder/<id>.wav``."""
    import numpy as np
    import soundfile as sf
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    generator = task.generator
    generator.eval()
    for wav in map(Path, held_out):
        data = np.load(data_dir / f"{wav.stem}.npz")
        mel = torch.from_numpy(data["mel"].T[None]).float()  # (1, n_mels, T_frames)
        f0 = torch.from_numpy(data["f0"][None]).float()  # (1, T_frames)
        with torch.no_grad():
            audio = generator(x=mel, f0=f0).reshape(-1).numpy()  # (T_frames * hop,)
        sf.write(str(folder / f"{wav.stem}.wav"), np.clip(audio, -1.0, 1.0), config["audio_sample_rate"], "FLOAT")


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    s = spec["raw"]
    src = Path(s["source"]).resolve()
    sys.path.insert(0, str(src))
    os.chdir(src)  # their configs name their bases relative to the repository root
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import TensorBoardLogger
    from training.nsf_HiFigan_task import nsf_HiFigan
    from utils.config_utils import override_dict, read_full_config
    from utils.training_utils import DsModelCheckpoint, DsTQDMProgressBar, get_strategy

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    config = read_full_config(Path("configs/base_hifi.yaml"))
    override_dict(config, s["config"])
    data_dir = Path(s["work"]) / "binary"
    held_out = list(s.get("held_out") or [])
    binarize(config, Path(s["corpus"]), data_dir, held_out)
    work_dir = Path(tempfile.mkdtemp(prefix="peer-singingvocoders-"))
    config.update({"DataIndexPath": str(data_dir / "index"), "work_dir": str(work_dir)})
    pl.seed_everything(config["seed"], workers=True)
    task = nsf_HiFigan(config=config)

    last_steps, top = spec.get("record_losses") or 10, spec.get("profile") or 0
    meter = StepMeter(spec["name"], spec["steps"], spec["warmup"], last_steps, config["hop_size"], top)
    last: dict[str, Any] = {}
    original = task._training_step

    def kept(sample: Any, batch_idx: int) -> Any:
        out = original(sample, batch_idx)
        last.clear()
        last.update(out)
        return out

    task._training_step = kept  # type: ignore[method-assign]
    counted: dict[str, int] = {}

    class Meter(Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            counted["params"] = sum(p.numel() for p in module.generator.parameters()) + sum(
                p.numel() for p in module.discriminator.parameters()
            )

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            b, _, n = batch["audio"].shape  # (B, 1, T_samples): equal crops
            meter.batch([int(n)] * int(b), config["audio_sample_rate"])

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            losses = {k: float(v.detach()) if hasattr(v, "detach") else float(v) for k, v in last.items()}
            if "aux_mel_loss" in losses:  # their mel loss is 45 x L1 of log-mels: the L1 itself, as speechtrain logs
                losses["mel_l1"] = losses["aux_mel_loss"] / float(config.get("lab_aux_melloss", 45))
            meter.step_done(losses)

    try:
        strategy: Any = get_strategy(
            config["pl_trainer_devices"],
            config["pl_trainer_num_nodes"],
            config["pl_trainer_accelerator"],
            config["pl_trainer_strategy"],
            config["pl_trainer_precision"],
        )
        adapted = ""
    except AttributeError as exc:  # a Lightning internal their helper reaches for is gone in lightning >= 2.5
        if config["pl_trainer_devices"] != 1:
            raise
        strategy = "auto"  # what their helper resolves to on one device
        adapted = f"; their get_strategy failed on lightning {pl.__version__} ({exc}): strategy='auto' on one device"
    trainer = pl.Trainer(  # as their train.py (no validation in the window; the meter added)
        accelerator=config["pl_trainer_accelerator"],
        devices=config["pl_trainer_devices"],
        num_nodes=config["pl_trainer_num_nodes"],
        strategy=strategy,
        precision=config["pl_trainer_precision"],
        callbacks=[
            DsModelCheckpoint(
                dirpath=work_dir,
                filename="model_ckpt_steps_{step}",
                auto_insert_metric_name=False,
                monitor="step",
                mode="max",
                save_last=False,
                save_top_k=config["num_ckpt_keep"],
                permanent_ckpt_start=config["permanent_ckpt_start"],
                permanent_ckpt_interval=config["permanent_ckpt_interval"],
                verbose=True,
            ),
            DsTQDMProgressBar(),
            Meter(),
        ],
        logger=TensorBoardLogger(save_dir=str(work_dir), name="lightning_logs", version="lastest"),
        val_check_interval=config["val_check_interval"],
        check_val_every_n_epoch=None,
        log_every_n_steps=1,
        max_steps=config["max_updates"],
        use_distributed_sampler=True,
        num_sanity_val_steps=config["num_sanity_val_steps"],
    )
    try:
        trainer.fit(task)
    except StopPeer:
        pass
    if spec.get("quality_dir"):  # after the timed window: what the bench scores beside our rows' audio
        write_quality_audio(task, config, data_dir, held_out, Path(spec["quality_dir"]))
    meter.write(
        out_path,
        precision="fp32"
        if str(config["pl_trainer_precision"]).startswith("32")
        else str(config["pl_trainer_precision"]),
        trained_parameters=counted.get("params"),
        applied={
            "peer": {
                "applied": True,
                "exact": True,
                "detail": "SingingVocoders nsf_HiFigan + lightning Trainer" + adapted,
            }
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
