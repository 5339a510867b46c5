"""Peer row: jik876/hifi-gan's own training step, from their modules: their ``Generator``,
``MultiPeriodDiscriminator``, ``MultiScaleDiscriminator``, ``feature_loss``/``generator_loss``/``discriminator_loss``
(``models.py``), their ``MelDataset`` and ``mel_spectrogram`` (``meldataset.py``), their AdamW pair and
per-epoch ExponentialLR, their DataLoader, in the order their ``train.py`` runs them.

    PYTHON_OF_THE_PEER_ENV bench/peers/jik876_hifigan.py SPEC.json OUT.json

SPEC.json's ``raw``: ``source`` (a folder holding their code, read out of a git checkout by the orchestrator; never
part of this repository), ``corpus`` (wavs/, 16-bit PCM as their ``load_wav`` reads), ``config`` (keys of their
``config_v1.json`` to override: sizes, features, batch, optimizer) and ``held_out`` (wav paths left out of their
train file list; with the spec's ``quality_dir`` their generator resynthesises each of them after the timed steps
as their ``inference.py`` does: ``<id>.wav``, what the bench scores).

Why not their ``train.py`` itself: it hard-codes ``cuda:N`` as its device and its checkpoint/TensorBoard/validation
side work; the loop below is its step, line for line, on the CPU, with the bench's meter. Their
``mel_spectrogram`` calls ``librosa.filters.mel`` positionally (an error on librosa >= 0.10) and ``torch.stft``
without ``return_complex`` (an error on torch 2.x): :func:`shim_meldataset` gives their module a keyword call and
a ``torch.stft`` that returns the real view of the complex result, which is what their code then reads.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from meter import StepMeter, StopPeer  # noqa: E402


def train_files(corpus: Path, held_out: list[str]) -> list[str]:
    """Their training file list (their ``get_dataset_filelist`` joins ids with the wav folder): every wav of the
    corpus's metadata but the held-out ones, in the metadata's order."""
    held = {Path(h).stem for h in held_out}
    ids = [ln.split("|")[0] for ln in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [str(corpus / "wavs" / f"{i}.wav") for i in ids if i not in held]


class _TorchForTheirMel:
    """``torch`` as their ``meldataset`` sees it: everything torch has, but ``stft`` with ``return_complex=True``
    viewed as real (the (..., 2) tensor torch 1.x returned without it, which their code reads)."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def stft(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("return_complex", True)
        out = self._torch.stft(*args, **kwargs)
        return self._torch.view_as_real(out) if out.is_complex() else out


def shim_meldataset(meldataset: Any) -> None:
    """Their ``meldataset`` on librosa >= 0.10 and torch 2.x (the two API changes only)."""
    import librosa
    import torch

    def mel_fn(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> Any:
        return librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax)

    meldataset.librosa_mel_fn = mel_fn
    meldataset.torch = _TorchForTheirMel(torch)


def write_quality_audio(generator: Any, h: Any, meldataset: Any, held_out: list[str], folder: Path) -> None:
    """Their generator's resynthesis of each held-out recording as their ``inference.py`` makes it (their
    ``load_wav`` / MAX_WAV_VALUE, their ``mel_spectrogram`` at ``h.fmax``, eval mode, weight norm removed), fp32,
    written as float ``folder/<id>.wav`` (theirs writes 16-bit: no rounding here)."""
    import numpy as np
    import soundfile as sf
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    generator.eval()
    generator.remove_weight_norm()
    with torch.no_grad():
        for wav_path in map(Path, held_out):
            wav, sr = meldataset.load_wav(str(wav_path))
            wav = torch.FloatTensor(wav / meldataset.MAX_WAV_VALUE)
            x = meldataset.mel_spectrogram(
                wav.unsqueeze(0), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size, h.fmin, h.fmax
            )
            audio = generator(x).squeeze().numpy()
            sf.write(str(folder / f"{wav_path.stem}.wav"), np.clip(audio, -1.0, 1.0), h.sampling_rate, "FLOAT")


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    s = spec["raw"]
    src = Path(s["source"]).resolve()
    sys.path.insert(0, str(src))
    import meldataset  # type: ignore[import-not-found]
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    shim_meldataset(meldataset)
    from env import AttrDict  # type: ignore[import-not-found]
    from meldataset import MelDataset, mel_spectrogram
    from models import (  # type: ignore[import-not-found]
        Generator,
        MultiPeriodDiscriminator,
        MultiScaleDiscriminator,
        discriminator_loss,
        feature_loss,
        generator_loss,
    )

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    h = AttrDict(json.loads((src / "config_v1.json").read_text()))
    h.update(s["config"])
    held_out = list(s.get("held_out") or [])
    torch.manual_seed(h.seed)  # their main(); the rest as their train() with device = the CPU
    device = torch.device("cpu")
    generator = Generator(h).to(device)
    mpd = MultiPeriodDiscriminator().to(device)
    msd = MultiScaleDiscriminator().to(device)
    optim_g = torch.optim.AdamW(generator.parameters(), h.learning_rate, betas=[h.adam_b1, h.adam_b2])
    optim_d = torch.optim.AdamW(
        itertools.chain(msd.parameters(), mpd.parameters()), h.learning_rate, betas=[h.adam_b1, h.adam_b2]
    )
    scheduler_g = torch.optim.lr_scheduler.ExponentialLR(optim_g, gamma=h.lr_decay, last_epoch=-1)
    scheduler_d = torch.optim.lr_scheduler.ExponentialLR(optim_d, gamma=h.lr_decay, last_epoch=-1)
    trainset = MelDataset(
        train_files(Path(s["corpus"]), held_out),
        h.segment_size,
        h.n_fft,
        h.num_mels,
        h.hop_size,
        h.win_size,
        h.sampling_rate,
        h.fmin,
        h.fmax,
        n_cache_reuse=0,
        shuffle=True,
        fmax_loss=h.fmax_for_loss,
        device=device,
        fine_tuning=False,
        base_mels_path=None,
    )
    train_loader = DataLoader(
        trainset,
        num_workers=h.num_workers,
        shuffle=False,
        sampler=None,
        batch_size=h.batch_size,
        pin_memory=torch.cuda.is_available(),  # theirs: True (a warning and nothing else on a CPU-only host)
        drop_last=True,
    )
    parameters = sum(p.numel() for m in (generator, mpd, msd) for p in m.parameters())

    last_steps, top = spec.get("record_losses") or 10, spec.get("profile") or 0
    meter = StepMeter(spec["name"], spec["steps"], spec["warmup"], last_steps, h.hop_size, top)
    generator.train()
    mpd.train()
    msd.train()
    try:
        for _epoch in itertools.count():
            for batch in train_loader:
                x, y, _, y_mel = batch
                meter.batch([int(y.shape[-1])] * int(y.shape[0]), h.sampling_rate)
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
                y_mel = y_mel.to(device, non_blocking=True)
                y = y.unsqueeze(1)

                y_g_hat = generator(x)
                y_g_hat_mel = mel_spectrogram(
                    y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size, h.fmin,
                    h.fmax_for_loss,
                )  # fmt: skip

                optim_d.zero_grad()
                # MPD
                y_df_hat_r, y_df_hat_g, _, _ = mpd(y, y_g_hat.detach())
                loss_disc_f, _, _ = discriminator_loss(y_df_hat_r, y_df_hat_g)
                # MSD
                y_ds_hat_r, y_ds_hat_g, _, _ = msd(y, y_g_hat.detach())
                loss_disc_s, _, _ = discriminator_loss(y_ds_hat_r, y_ds_hat_g)
                loss_disc_all = loss_disc_s + loss_disc_f
                loss_disc_all.backward()
                optim_d.step()

                # Generator
                optim_g.zero_grad()
                loss_mel = F.l1_loss(y_mel, y_g_hat_mel) * 45
                y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
                y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
                loss_fm_f = feature_loss(fmap_f_r, fmap_f_g)
                loss_fm_s = feature_loss(fmap_s_r, fmap_s_g)
                loss_gen_f, _ = generator_loss(y_df_hat_g)
                loss_gen_s, _ = generator_loss(y_ds_hat_g)
                loss_gen_all = loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f + loss_mel
                loss_gen_all.backward()
                optim_g.step()

                meter.step_done(
                    {
                        "mel_l1": float(loss_mel.detach()) / 45.0,  # their "Mel-Spec. Error", as speechtrain logs it
                        "loss_gen_all": float(loss_gen_all.detach()),
                        "loss_disc_all": float(loss_disc_all.detach()),
                    }
                )
            scheduler_g.step()
            scheduler_d.step()
    except StopPeer:
        pass
    if spec.get("quality_dir"):  # after the timed window: what the bench scores beside our rows' audio
        write_quality_audio(generator, h, meldataset, held_out, Path(spec["quality_dir"]))
    meter.write(
        out_path,
        precision="fp32",
        trained_parameters=parameters,
        applied={
            "peer": {
                "applied": True,
                "exact": True,
                "detail": "jik876/hifi-gan models.py + meldataset.py, train.py's step on the CPU",
            }
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
