"""Peer row: Coqui's own XTTS GPT trainer (``TTS.tts.layers.xtts.trainer.gpt_trainer.GPTTrainer`` under
``trainer.Trainer``, coqui-tts 0.28 / coqui-tts-trainer 0.4), timed in its own ``fit()`` loop.

    PYTHON_OF_THE_PEER_ENV bench/peers/coqui_xtts.py SPEC.json OUT.json

SPEC.json is a ``RunSpec`` record whose ``raw`` holds the settings (see ``peer_xtts.py``): the Coqui-layout
checkpoint folder (a ``model.random_checkpoint: tiny_coqui`` one, so nothing is downloaded), the LJSpeech-layout
corpus, the language, batch size, AdamW settings and the conditioning clip lengths. Coqui's recipe is followed
(``recipes/ljspeech/xtts_v2/train_gpt_xtts.py``): ``GPTArgs``/``GPTTrainerConfig``, ``GPTTrainer.init_from_config``,
``Trainer(TrainerArgs(), config, out, model=..., train_samples=...)``, its loop (``Trainer._fit``, what ``fit()``
runs inside handlers that turn any exception into an exit); no eval, no test sentences.

What the bench changes, all listed in the table: the DVAE that ``GPTTrainer`` builds with XTTS-v2's hard-coded
sizes is built with the checkpoint's sizes instead (the tiny layout's), so its ``dvae.pth`` loads; torchaudio is
the bench's shim when the real one is not installed; ``Trainer.train_step`` is wrapped to count each batch and
stop after the timed steps (it calls the original).
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


def samples_of(corpus: Path, language: str) -> list[dict[str, Any]]:
    """Coqui's sample dicts from an LJSpeech-layout folder (``metadata.csv``: id|text|normalized), as its
    ``ljspeech`` formatter gives them."""
    out = []
    for line in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        uid, text = line.split("|")[:2]
        out.append(
            {
                "text": text,
                "audio_file": str(corpus / "wavs" / f"{uid}.wav"),
                "speaker_name": "ljspeech",
                "language": language,
                "root_path": str(corpus),
                "audio_unique_name": uid,
            }
        )
    return out


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    s = spec["raw"]
    import torch
    from trainer import Trainer, TrainerArgs
    from TTS.tts.layers.xtts.trainer import gpt_trainer
    from TTS.tts.layers.xtts.trainer.gpt_trainer import GPTArgs, GPTTrainer, GPTTrainerConfig
    from TTS.tts.models.xtts import XttsAudioConfig

    if spec.get("threads"):  # Coqui's XTTS dataset module set 1 thread when imported: back to the row's count
        torch.set_num_threads(int(spec["threads"]))

    ckpt = Path(s["checkpoint_dir"])
    published = json.loads((ckpt / "config.json").read_text())
    sizes = published.get("speechtrain_arch", {})
    hard_coded = gpt_trainer.DiscreteVAE

    def dvae_of_this_checkpoint(**kw: Any) -> Any:
        kw["hidden_dim"] = sizes.get("dvae_hidden_dim", kw["hidden_dim"])
        kw["codebook_dim"] = sizes.get("dvae_codebook_dim", kw["codebook_dim"])
        kw["num_resnet_blocks"] = sizes.get("dvae_num_resnet_blocks", kw["num_resnet_blocks"])
        return hard_coded(**kw)

    gpt_trainer.DiscreteVAE = dvae_of_this_checkpoint  # type: ignore[misc]
    ours = ("tokenizer_file", "gpt_checkpoint", "decoder_checkpoint", "clvp_checkpoint")
    arch = {k: v for k, v in published["model_args"].items() if k in GPTArgs.__dataclass_fields__ and k not in ours}
    model_args = GPTArgs(
        **arch,
        max_conditioning_length=s["max_conditioning_length"],
        min_conditioning_length=s["min_conditioning_length"],
        max_wav_length=s["max_wav_length"],
        max_text_length=s["max_text_length"],
        mel_norm_file=str(ckpt / "mel_stats.pth"),
        dvae_checkpoint=str(ckpt / "dvae.pth"),
        xtts_checkpoint=str(ckpt / "model.pth"),
        tokenizer_file=str(ckpt / "vocab.json"),
    )
    out_dir = Path(tempfile.mkdtemp(prefix="peer-coqui-xtts-"))
    config = GPTTrainerConfig(
        output_path=str(out_dir),
        model_args=model_args,
        run_name="peer_xtts",
        project_name="peer",
        dashboard_logger="tensorboard",
        audio=XttsAudioConfig(sample_rate=22050, dvae_sample_rate=22050, output_sample_rate=24000),
        batch_size=s["batch_size"],
        batch_group_size=0,
        eval_batch_size=s["batch_size"],
        num_loader_workers=s["num_loader_workers"],
        eval_split_max_size=1,
        print_step=10**9,
        plot_step=10**9,
        log_model_step=10**9,
        save_step=10**9,
        save_n_checkpoints=1,
        save_checkpoints=False,
        print_eval=False,
        run_eval=False,
        test_delay_epochs=10**9,
        mixed_precision=s["precision"] != "fp32",
        precision=s["precision"],
        optimizer="AdamW",
        optimizer_wd_only_on_weights=False,
        optimizer_params={"betas": list(s["betas"]), "eps": s["eps"], "weight_decay": s["weight_decay"]},
        lr=s["lr"],
        lr_scheduler=None,
        grad_clip=0.0,
        epochs=10**6,
        training_seed=s["seed"],
    )
    model = GPTTrainer.init_from_config(config)
    trained = sum(p.numel() for p in model.xtts.gpt.parameters())
    samples = samples_of(Path(s["corpus"]), s["language"])
    trainer = Trainer(TrainerArgs(), config, str(out_dir), model=model, train_samples=samples, eval_samples=samples[:1])
    last = spec.get("record_losses") or 10
    meter = StepMeter(spec["name"], spec["steps"], spec["warmup"], last, 256, spec.get("profile") or 0)
    original = trainer.train_step

    def counted_step(batch: Any, *args: Any, **kwargs: Any) -> Any:
        meter.batch([int(n) for n in batch["wav_lengths"]], 22050)  # host tensor before format_batch
        outputs, losses = original(batch, *args, **kwargs)
        meter.step_done({k: v for k, v in (losses or {}).items() if k.startswith("loss")})
        return outputs, losses

    trainer.train_step = counted_step  # type: ignore[method-assign]
    try:
        trainer._fit()  # fit() is _fit() inside handlers that turn any exception into sys.exit
    except StopPeer:
        pass
    meter.write(
        out_path,
        precision=s["precision"],
        trained_parameters=trained,
        applied={"peer": {"applied": True, "exact": True, "detail": "Coqui GPTTrainer + trainer.Trainer.fit"}},
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRAINER_TELEMETRY", "0")
    sys.exit(main(*sys.argv[1:3]))
