"""The least of torchaudio that the peers' training code needs, for a machine with no torchaudio build that
matches its torch (there is no CPU torchaudio for torch 2.13 here). Put on PYTHONPATH by ``bench/peers/run.py``
for the peer rows only, and listed in the table as "supplied by the bench".

- ``load(path)``: soundfile's reader, as ``(channels, samples)`` float32 and the file's rate;
- ``functional.resample``: the identity when the rates agree (the bench's corpora are written at the rate the
  peers read); anything else is refused, so a peer never trains on audio this shim changed;
- ``transforms.MelSpectrogram``: speechtrain's torch-only equivalent (centred STFT, periodic Hann window, power
  spectrum, HTK filters with optional Slaney norm), which equals torchaudio's to float precision
  (speechtrain's XTTS parity check against Coqui, ``scripts/check_coqui_parity.py``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

__version__ = "0.0+speechtrain-bench-shim"


def load(path: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, int]:
    import numpy as np
    import soundfile as sf

    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)  # (samples, channels)
    return torch.from_numpy(np.ascontiguousarray(audio.T)), int(rate)


def _resample(waveform: torch.Tensor, orig_freq: int, new_freq: int, *args: Any, **kwargs: Any) -> torch.Tensor:
    if int(orig_freq) == int(new_freq):
        return waveform
    raise NotImplementedError(
        f"torchaudio shim (speechtrain bench): resampling {orig_freq} -> {new_freq} Hz is not supplied; write the "
        "corpus at the rate the peer reads"
    )


class MelSpectrogram(torch.nn.Module):
    def __init__(
        self,
        sample_rate: int = 16000,
        n_fft: int = 400,
        win_length: int | None = None,
        hop_length: int | None = None,
        f_min: float = 0.0,
        f_max: float | None = None,
        pad: int = 0,
        n_mels: int = 128,
        window_fn: Any = torch.hann_window,
        power: float = 2.0,
        normalized: bool = False,
        wkwargs: Any = None,
        center: bool = True,
        pad_mode: str = "reflect",
        onesided: Any = None,
        norm: str | None = None,
        mel_scale: str = "htk",
    ) -> None:
        super().__init__()
        from speechtrain.models.xtts.audio import MelSpectrogram as TorchMel

        unsupported = {
            "pad": pad != 0,
            "power": power != 2.0,
            "normalized": bool(normalized),
            "center": not center,
            "pad_mode": pad_mode != "reflect",
            "mel_scale": mel_scale != "htk",
            "wkwargs": bool(wkwargs),
        }
        bad = [k for k, v in unsupported.items() if v]
        if bad:
            raise NotImplementedError(f"torchaudio shim (speechtrain bench): MelSpectrogram({', '.join(bad)}=...)")
        win = win_length or n_fft
        mel = TorchMel(sample_rate, n_fft, hop_length or win // 2, win, n_mels, f_min, f_max, norm, window_fn, True)
        # torchaudio's state dict holds ``spectrogram.window`` and ``mel_scale.fb`` (Coqui's XTTS model.pth has
        # them for the speaker encoder): the same submodules and persistent buffers here, or a strict load fails
        self.spectrogram, self.mel_scale = mel.spectrogram, mel.mel_scale
        object.__setattr__(self, "_mel", mel)  # its forward, not a second owner of the buffers

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        shape = waveform.shape
        out = self._mel(waveform.reshape(-1, shape[-1]))
        return out.reshape(*shape[:-1], *out.shape[-2:])


functional = SimpleNamespace(resample=_resample)
transforms = SimpleNamespace(MelSpectrogram=MelSpectrogram)
