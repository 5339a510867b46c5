"""Monotonic alignment search (Glow-TTS / VITS): the most likely monotonic, surjective path that
assigns every spectrogram frame to one text token.

:func:`maximum_path` runs on the device, vectorised over the batch: a loop over the frame axis
with tensor ops over (batch, tokens), then a vectorised backtrack. It needs no compiled extension
and no host-device sync. :func:`maximum_path_reference` is the plain per-item dynamic programme in
NumPy, kept as the specification the tests compare against (exact equality of the paths).
"""

from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def maximum_path(log_p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Hard monotonic alignment.

    Args:
        log_p: ``(B, T_frames, T_tokens)`` log-likelihood of frame t under token s.
        mask: ``(B, T_frames, T_tokens)`` True (or 1) on real (frame, token) pairs; per item it must be
            a rectangle ``frames_b x tokens_b`` with ``frames_b >= tokens_b``.

    Returns:
        ``(B, T_frames, T_tokens)`` path of 0/1 in ``log_p``'s dtype: each real frame picks one token,
        token indices never decrease, the first frame takes token 0 and the last takes the last token.
    """
    device = log_p.device
    value = log_p.float()
    mask = mask.bool()
    b, t_y, t_x = value.shape
    frames = mask[:, :, 0].sum(1)  # (B,) real frames per item
    tokens = mask[:, 0, :].sum(1)  # (B,) real tokens per item
    neg_inf = torch.tensor(float("-inf"), device=device)
    x = torch.arange(t_x, device=device).unsqueeze(0)  # (1, T_tokens)
    lowest = (tokens - frames).unsqueeze(1)  # (B, 1): token x is reachable at frame y when x >= lowest + y
    acc = torch.empty_like(value)  # accumulated best log-likelihood, -inf where unreachable
    prev = torch.full((b, t_x), float("-inf"), device=device)
    start = torch.zeros((b, t_x), device=device).masked_fill(x != 0, float("-inf"))  # before frame 0
    for y in range(t_y):
        if y == 0:
            best = start
        else:
            stay = prev.masked_fill(x == y, float("-inf"))  # token x at frame y-1 (cannot when x == y)
            advance = torch.cat([neg_inf.expand(b, 1), prev[:, :-1]], dim=1)  # token x-1 at frame y-1
            best = torch.maximum(stay, advance)
        valid = (x >= lowest + y) & (x < tokens.unsqueeze(1)) & (x <= y) & (y < frames.unsqueeze(1))
        prev = torch.where(valid, value[:, y] + best, neg_inf)
        acc[:, y] = prev

    path = torch.zeros_like(value)
    index = (tokens - 1).clamp(min=0)  # (B,) token of the current frame, walking backwards
    rows = torch.arange(b, device=device)
    for y in range(t_y - 1, -1, -1):
        active = y < frames
        path[rows, y, index] = active.to(path.dtype)
        if y == 0:
            break
        here = acc[rows, y - 1, index]
        before = acc[rows, y - 1, (index - 1).clamp(min=0)]
        step = active & (index != 0) & ((index == y) | (here < before))
        index = index - step.long()
    return path.to(log_p.dtype)


def maximum_path_reference(log_p: np.ndarray, frames: int, tokens: int) -> np.ndarray:
    """Reference dynamic programme for one item: ``log_p`` ``(T_frames, T_tokens)`` (only the first
    ``frames x tokens`` block is read) -> 0/1 path of the same shape (float32)."""
    value = np.array(log_p, dtype=np.float32, copy=True)
    path = np.zeros_like(value)
    for y in range(frames):
        for x in range(max(0, tokens + y - frames), min(tokens, y + 1)):
            stay = value[y - 1, x] if x != y else -np.inf
            if x == 0:
                advance = np.float32(0.0) if y == 0 else -np.inf
            else:
                advance = value[y - 1, x - 1]
            value[y, x] = value[y, x] + max(stay, advance)
    index = tokens - 1
    for y in range(frames - 1, -1, -1):
        path[y, index] = 1
        if index != 0 and (index == y or value[y - 1, index] < value[y - 1, index - 1]):
            index -= 1
    return path
