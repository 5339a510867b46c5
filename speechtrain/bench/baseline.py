"""The baseline every speed-up is measured against: a plain PyTorch loop, written the way a user
writes it before optimizing anything.

- fp32, no autocast, no compile, default module settings: the model's attention is what the family
  builds by default, ``scaled_dot_product_attention`` (what a PyTorch 2 user calls, or gets from
  ``nn.MultiheadAttention``); ``explicit_attention=True`` gives the naive softmax(QK^T)V row instead;
- ``torch.utils.data.DataLoader(dataset, batch_size=data.batch_size, shuffle=True)`` with default
  settings (no workers, no pinning) and a simple pad-to-longest collate (random crops of
  ``data.crop_frames`` for vocoders, as a user's vocoder loop would do);
- one plain ``torch.optim.AdamW`` per optimizer stage (torch's default kernel choice), gradient
  clipping as configured, ``zero_grad`` / ``backward`` / ``step``;
- the same model and the same maths: the loss comes from the Task's own ``training_step``; when
  the config computes features or augmentation on the device (``data.features_on_device``,
  ``data.noise_snr_db``, SpecAugment masks), the loop applies the same module to each batch, as a
  user's loop would call its own feature code.

``fair=True`` is the loop a competent user writes on a GPU (the fair baseline, the GPU headline's
reference): the same loop with bf16 autocast around forward and loss where the device has fast bf16
maths (:func:`fair_precision`), the model's SDPA attention, and ``AdamW(fused=True)`` (foreach where the
fused kernel is missing); the same random batches of ``data.batch_size``.

``bench/baseline_loop.py`` runs this loop as a script.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from speechtrain.data.batch import Batch
from speechtrain.train.task import Task


class PadCollate:
    """Pads items to the longest one in the batch (or crops them to ``crop_frames``).

    ``items`` are SpeechDataset dicts; the result is a :class:`Batch` with ``mel`` (B, n_mels,
    T_frames), ``audio`` (B, 1, T_samples), ``tokens`` (B, L_tokens), ``f0`` (B, T_frames) and their ``*_lengths``,
    plus ``labels`` / ``speakers`` (B,) and the transcripts (``Batch.texts``) when the task asks for them.
    """

    def __init__(self, needs: Any, hop_length: int, sample_rate: int, crop_frames: int | None = None) -> None:
        self.needs = needs
        self.hop_length = hop_length
        self.sample_rate = sample_rate
        self.crop_frames = crop_frames

    def _crop(self, item: dict[str, Any]) -> dict[str, Any]:
        # the same random window of mel frames and of samples (audio is T_frames * hop long)
        crop = self.crop_frames
        frames = item["mel"].shape[-1] if "mel" in item else len(item["audio"]) // self.hop_length
        if crop is None or frames <= crop:
            return item
        start = random.randint(0, frames - crop)
        out = dict(item)
        if "mel" in item:
            out["mel"] = item["mel"][:, start : start + crop]
        if "audio" in item:
            hop = self.hop_length
            out["audio"] = item["audio"][start * hop : (start + crop) * hop]
        if "f0" in item:  # one value per mel frame (NSF vocoders)
            out["f0"] = item["f0"][start : start + crop]
        return out

    def __call__(self, items: Sequence[dict[str, Any]]) -> Batch:
        if self.crop_frames:
            items = [self._crop(it) for it in items]
        tensors: dict[str, torch.Tensor] = {}
        if "mel" in items[0]:
            tensors["mel"], tensors["mel_lengths"] = _pad([torch.from_numpy(np.asarray(it["mel"])) for it in items])
        if "audio" in items[0]:
            audio, lengths = _pad([torch.from_numpy(np.asarray(it["audio"])) for it in items])
            tensors["audio"], tensors["audio_lengths"] = audio.unsqueeze(1), lengths  # (B, 1, T_samples)
        if "tokens" in items[0]:
            tensors["tokens"], tensors["token_lengths"] = _pad([torch.as_tensor(it["tokens"]) for it in items])
        if "f0" in items[0]:  # (B, T_frames) Hz, padded with 0 (unvoiced)
            f0 = [torch.from_numpy(np.asarray(it["f0"], dtype=np.float32).reshape(-1)) for it in items]
            tensors["f0"], tensors["f0_lengths"] = _pad(f0)
        if self.needs.labels:
            tensors["labels"] = torch.tensor([int(it["label"]) for it in items], dtype=torch.long)
        if self.needs.speakers:
            tensors["speakers"] = torch.tensor([int(it["speaker"]) for it in items], dtype=torch.long)
        texts = [str(it.get("text") or "") for it in items] if self.needs.text else []  # a family's own front end
        return Batch(tensors, [str(it["id"]) for it in items], self.hop_length, self.sample_rate, texts=texts)


def _pad(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad along the last axis: list of (..., T_i) -> (B, ..., T_max) and lengths (B,)."""
    lengths = torch.tensor([s.shape[-1] for s in seqs], dtype=torch.long)
    out = seqs[0].new_zeros((len(seqs), *seqs[0].shape[:-1], int(lengths.max())))
    for i, s in enumerate(seqs):
        out[i, ..., : s.shape[-1]] = s
    return out, lengths


def plain_loader(cfg: Any, dataset: Any, needs: Any) -> torch.utils.data.DataLoader:
    """``DataLoader(dataset, batch_size=data.batch_size, shuffle=True)``: default settings."""
    collate = PadCollate(needs, dataset.hop_length, dataset.sample_rate, cfg.data.crop_frames)
    batch_size = min(cfg.data.batch_size, len(dataset))
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=collate, drop_last=True)


def endless(loader: torch.utils.data.DataLoader) -> Iterator[Batch]:
    """Batches forever, epoch after epoch (a user's ``for epoch in ...: for batch in loader``)."""
    while True:
        yield from loader


def fair_precision(device_type: str) -> str:
    """What the fair loop computes in: bf16 autocast on a GPU with bf16 (Ampere or newer), else fp32 (on a CPU
    bf16 autocast is slower than fp32 without AMX: a user would not pick it)."""
    if device_type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp32"


def _adamw(params: list[nn.Parameter], fused: bool, **kwargs: Any) -> tuple[torch.optim.Optimizer, str]:
    """AdamW, fused when asked and the kernel exists for the parameters' device (else foreach), and its name."""
    if fused:
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs), "fused AdamW"
        except (RuntimeError, ValueError, TypeError):  # no fused kernel for this device or dtype
            return torch.optim.AdamW(params, foreach=True, **kwargs), "foreach AdamW (no fused kernel here)"
    return torch.optim.AdamW(params, **kwargs), "AdamW"


class PlainLoop:
    """The user's loop: modules on the device, one AdamW per stage, fp32 steps (``fair``: bf16 autocast
    where the device has it, fused AdamW)."""

    def __init__(
        self, cfg: Any, task: Task, device: torch.device, explicit_attention: bool = False, fair: bool = False
    ) -> None:
        self.cfg = cfg
        self.task = task
        self.device = device
        #: "bf16" or "fp32": the autocast the steps run under
        self.precision = fair_precision(device.type) if fair else "fp32"
        modules = task.modules()
        for module in modules.values():
            module.to(device).train()
        #: attention modules switched to the explicit path (``explicit_attention``; 0 when the model has none)
        self.explicit_attention_modules = 0
        if explicit_attention:
            from speechtrain.accel.sdpa import attention_modules

            for module in modules.values():
                for _, attn in attention_modules(module):
                    setattr(attn, "use_sdpa", False)  # noqa: B010 - the attention class's own switch
                    self.explicit_attention_modules += 1
        from speechtrain.data.loader import DeviceFeatures

        features = DeviceFeatures(cfg.data, task.needs())
        self.features = features.to(device).train() if features.active else None
        self.stages: list[tuple[Any, list[nn.Parameter], torch.optim.Optimizer]] = []
        #: the optimizer kernel the stages got ("AdamW", "fused AdamW", ...)
        self.optimizer_name = "AdamW"
        for spec in task.optimizer_specs():
            params = [p for name in spec.modules for p in modules[name].parameters() if p.requires_grad]
            o = cfg.optim
            opt, self.optimizer_name = _adamw(
                params,
                fair,
                lr=o.lr * spec.lr_multiplier,
                betas=tuple(o.betas),
                eps=o.eps,
                weight_decay=o.weight_decay,
            )
            self.stages.append((spec, params, opt))

    def autocast(self) -> Any:
        """The forward's autocast context (a no-op in fp32)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def prepare(self, batch: Batch) -> Batch:
        """Host batch -> device, then the config's on-device features/augmentation."""
        batch = batch.to(self.device)
        return self.features(batch, training=True) if self.features is not None else batch

    def losses(self, batch: Batch) -> list[torch.Tensor]:
        """Forward + backward of every stage on a device batch, without the optimizer update
        (what the FLOP counter measures). Returns each stage's loss."""
        cache: dict[str, Any] = {}
        out = []
        for spec, _, opt in self.stages:
            opt.zero_grad(set_to_none=True)
            with self.autocast():
                loss = self.task.training_step(batch, spec.name, cache)["loss"]
            loss.backward()
            out.append(loss.detach())
        return out

    def step(self, batch: Batch) -> None:
        """One training step on a host batch."""
        batch = self.prepare(batch)
        cache: dict[str, Any] = {}
        for spec, params, opt in self.stages:
            opt.zero_grad(set_to_none=True)
            with self.autocast():
                loss = self.task.training_step(batch, spec.name, cache)["loss"]
            loss.backward()
            clip = spec.grad_clip if spec.grad_clip is not None else self.cfg.optim.grad_clip
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()

    def zero_grad(self) -> None:
        for _, _, opt in self.stages:
            opt.zero_grad(set_to_none=True)
