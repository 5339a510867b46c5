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


@torch.compiler.disable  # a loop over frames: compiled, it would unroll and recompile for every length
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
    mask = mask.bool()
    b, t_y, t_x = log_p.shape
    frames = mask[:, :, 0].sum(1)  # (B,) real frames per item
    tokens = mask[:, 0, :].sum(1)  # (B,) real tokens per item
    y = torch.arange(t_y, device=device).view(1, t_y, 1)
    x = torch.arange(t_x, device=device).view(1, 1, t_x)
    # cell (y, x) is reachable when token x can still be reached from frame 0 and can still reach the
    # last token by the last frame; unreachable cells are -inf, which makes every boundary case of the
    # recursion (x == y, x == 0) fall out of the max without extra masks
    reachable = (
        (x <= y) & (x >= (tokens - frames).view(b, 1, 1) + y) & (x < tokens.view(b, 1, 1)) & (y < frames.view(b, 1, 1))
    )  # (B, T_frames, T_tokens)
    value = log_p.float().masked_fill(~reachable, float("-inf"))
    acc = torch.empty_like(value)  # best log-likelihood of a path ending in (y, x)
    acc[:, 0] = value[:, 0]
    for t in range(1, t_y):
        prev = acc[:, t - 1]  # (B, T_tokens)
        advance = torch.nn.functional.pad(prev[:, :-1], (1, 0), value=float("-inf"))  # from token x-1
        torch.add(value[:, t], torch.maximum(prev, advance), out=acc[:, t])

    # step[b, t, x]: the best path into (t, x) came from token x-1 (strictly better than staying);
    # masked to reachable cells so that padded frames never move the backtrack
    stay, came = acc[:, :-1], torch.nn.functional.pad(acc[:, :-1, :-1], (1, 0), value=float("-inf"))
    step = torch.zeros((b, t_y, t_x), dtype=torch.uint8, device=device)
    step[:, 1:] = (stay < came) & reachable[:, 1:]
    token = torch.empty((b, t_y), dtype=torch.long, device=device)
    index = (tokens - 1).clamp(min=0).unsqueeze(1)  # (B, 1) token of the current frame, walking backwards
    for t in range(t_y - 1, -1, -1):
        token[:, t : t + 1] = index
        index = index - step[:, t].gather(1, index).long()
    # one_hot, without its range check (a host sync on the CPU): token is in [0, t_x) by construction
    path = (token.unsqueeze(2) == torch.arange(t_x, device=device)).to(log_p.dtype)  # (B, T_frames, T_tokens)
    return path * (y.squeeze(2) < frames.view(b, 1)).unsqueeze(2).to(log_p.dtype)


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
