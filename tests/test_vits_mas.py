"""Monotonic alignment search: the batched device version equals the per-item reference exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speechtrain.models.vits.mas import maximum_path, maximum_path_reference


def _ragged_batch(rng: np.random.Generator, batch: int, max_frames: int, max_tokens: int):
    tokens = rng.integers(1, max_tokens + 1, size=batch)
    frames = np.array([rng.integers(t, max_frames + 1) for t in tokens])  # frames >= tokens per item
    tokens[0], frames[0] = max_tokens, max_frames  # the longest item sets the padded shape
    log_p = rng.standard_normal((batch, max_frames, max_tokens)).astype(np.float32) * 3
    mask = np.zeros((batch, max_frames, max_tokens), dtype=bool)
    for b in range(batch):
        mask[b, : frames[b], : tokens[b]] = True
    return log_p, mask, frames, tokens


@pytest.mark.parametrize("seed", range(6))
def test_batched_mas_equals_reference_on_ragged_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    log_p, mask, frames, tokens = _ragged_batch(rng, batch=5, max_frames=int(rng.integers(8, 40)), max_tokens=7)
    path = maximum_path(torch.from_numpy(log_p), torch.from_numpy(mask)).numpy()
    for b in range(len(frames)):
        ref = maximum_path_reference(log_p[b], int(frames[b]), int(tokens[b]))
        np.testing.assert_array_equal(path[b], ref)


def test_mas_path_is_monotonic_and_covers_every_token() -> None:
    rng = np.random.default_rng(42)
    log_p, mask, frames, tokens = _ragged_batch(rng, batch=6, max_frames=30, max_tokens=9)
    path = maximum_path(torch.from_numpy(log_p), torch.from_numpy(mask)).numpy()
    for b in range(len(frames)):
        f, t = int(frames[b]), int(tokens[b])
        assert path[b].sum() == f  # one token per real frame, nothing on padding
        assert (path[b, :f].sum(1) == 1).all()
        token_of_frame = path[b, :f].argmax(1)
        assert token_of_frame[0] == 0 and token_of_frame[-1] == t - 1
        steps = np.diff(token_of_frame)
        assert ((steps == 0) | (steps == 1)).all()  # monotonic, no token skipped
        assert (path[b, :, :t].sum(0) >= 1).all()


def test_mas_prefers_the_obvious_alignment() -> None:
    # frame t clearly belongs to token t // 3: the search must find exactly that
    frames, tokens = 12, 4
    log_p = np.full((1, frames, tokens), -10.0, dtype=np.float32)
    for t in range(frames):
        log_p[0, t, t // 3] = 0.0
    path = maximum_path(torch.from_numpy(log_p), torch.ones(1, frames, tokens, dtype=torch.bool))
    assert path[0].argmax(1).tolist() == [t // 3 for t in range(frames)]


def test_mas_ties_follow_the_reference() -> None:
    # all-equal scores: many optimal paths; the batched version must break ties as the reference does
    log_p = np.zeros((3, 10, 4), dtype=np.float32)
    mask = np.zeros((3, 10, 4), dtype=bool)
    mask[0], mask[1, :7, :3], mask[2, :4, :4] = True, True, True
    path = maximum_path(torch.from_numpy(log_p), torch.from_numpy(mask)).numpy()
    for b, (f, t) in enumerate([(10, 4), (7, 3), (4, 4)]):
        np.testing.assert_array_equal(path[b], maximum_path_reference(log_p[b], f, t))


def test_mas_runs_without_grad_and_keeps_dtype() -> None:
    log_p = torch.randn(2, 6, 3, requires_grad=True)
    path = maximum_path(log_p, torch.ones(2, 6, 3))
    assert not path.requires_grad and path.dtype == log_p.dtype


@pytest.mark.gpu
def test_batched_mas_on_cuda_equals_reference() -> None:
    rng = np.random.default_rng(7)
    log_p, mask, frames, tokens = _ragged_batch(rng, batch=8, max_frames=120, max_tokens=30)
    path = maximum_path(torch.from_numpy(log_p).cuda(), torch.from_numpy(mask).cuda()).cpu().numpy()
    for b in range(len(frames)):
        np.testing.assert_array_equal(path[b], maximum_path_reference(log_p[b], int(frames[b]), int(tokens[b])))
