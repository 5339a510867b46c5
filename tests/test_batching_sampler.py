"""Invariants of the duration-bucketed batch sampler: coverage, budgets, order, resume, ranks."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from speechtrain.config import ConfigError, DataConfig
from speechtrain.data.sampler import OVERSIZE, BucketBatchSampler, equal_duration_boundaries, item_cost


def _frames(n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(300, 120, n), 20, 700).astype(np.int64)


def _sampler(
    frames: np.ndarray,
    *,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    ids: list[str] | None = None,
    **data: object,
) -> BucketBatchSampler:
    """The sampler a data section with these batching settings asks for (10 buckets unless given:
    these tests pin the sampler's dealing, not the automatic bucket count)."""
    data.setdefault("num_buckets", 10)
    return BucketBatchSampler.from_config(
        DataConfig(**data), frames, seed=seed, ids=ids, rank=rank, world_size=world_size
    )


def _epoch(sampler: BucketBatchSampler) -> list[list[int]]:
    return [list(k.indices) for k in sampler.epoch_keys()]


MODES = [
    dict(max_frames=3000),
    dict(max_frames=3000, quadratic_frames=500.0, pad_multiple=8),
    dict(bucketing=False, batch_size=7),
    dict(crop_frames=32, batch_size=5),
]


@pytest.mark.parametrize("kw", MODES)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_utterance_once_per_epoch_across_ranks(kw: dict, world: int) -> None:
    frames = _frames()
    samplers = [_sampler(frames, seed=3, rank=r, world_size=world, **kw) for r in range(world)]
    per_rank = [_epoch(s) for s in samplers]
    assert len({len(b) for b in per_rank}) == 1, "ranks must get the same number of batches"
    seen = Counter(i for batches in per_rank for b in batches for i in b)
    remainder = samplers[0].current_plan().remainder
    assert len(remainder) <= world - 1
    seen.update(i for k in remainder for i in k.indices)
    assert sorted(seen) == list(range(len(frames))) and set(seen.values()) == {1}
    # ranks never share an utterance within the epoch
    sets = [{i for b in batches for i in b} for batches in per_rank]
    for a in range(world):
        for b in range(a + 1, world):
            assert not sets[a] & sets[b]


@pytest.mark.parametrize("world", [2, 3])
def test_deferred_remainder_is_not_lost_across_two_epochs(world: int) -> None:
    frames = _frames(211, seed=1)
    samplers = [_sampler(frames, max_frames=2500, seed=5, rank=r, world_size=world) for r in range(world)]
    seen: Counter[int] = Counter()
    carried_any = False
    for _epoch_no in range(2):
        for s in samplers:
            seen.update(i for b in _epoch(s) for i in b)
        for s in samplers:
            s.advance()
        carried_any |= bool(samplers[0].carried)
        assert all(s.carried == samplers[0].carried for s in samplers)
    seen.update(i for k in samplers[0].carried for i in k.indices)
    assert sorted(seen) == list(range(len(frames))) and set(seen.values()) == {2}
    assert carried_any, "test data should leave a remainder to carry (pick another seed)"


def test_drop_report_counts_what_it_drops() -> None:
    frames = _frames(205, seed=2)
    s = _sampler(frames, max_frames=2500, seed=1, rank=0, world_size=3, rank_remainder="drop_report")
    others = [
        _sampler(frames, max_frames=2500, seed=1, rank=r, world_size=3, rank_remainder="drop_report") for r in (1, 2)
    ]
    items = sum(len(b) for x in [s, *others] for b in _epoch(x))
    s.advance()
    assert s.carried == []
    assert items + s.dropped_items == len(frames)


@pytest.mark.parametrize("kw", MODES[:2])
def test_no_batch_over_its_frame_budget(kw: dict) -> None:
    frames = np.concatenate([_frames(), [2900, 3100]])  # 3100 > budget: its own batch
    s = _sampler(frames, seed=0, **kw)
    for key in s.epoch_keys():
        lengths = frames[list(key.indices)]
        cost = len(lengths) * item_cost(s.frame_budget.padded(lengths.max()), s.frame_budget.quadratic_frames)
        if key.bucket == OVERSIZE:
            assert len(lengths) == 1 and cost > s.budget
        else:
            assert cost <= s.budget
            assert len(lengths) <= s.frame_budget.max_batch_size
    assert s.report.oversize >= 1 and "#301" in s.report.oversize_ids


def test_oversize_skip_is_counted_with_ids() -> None:
    frames = np.array([10, 20, 30, 500, 40, 600])
    ids = [f"u{i}" for i in range(6)]
    s = _sampler(frames, max_frames=200, oversize="skip", ids=ids, seed=0)
    covered = sorted(i for b in _epoch(s) for i in b)
    assert covered == [0, 1, 2, 4]
    assert s.report.oversize == 2 and s.report.oversize_ids == ["u3", "u5"]
    assert s.report.skipped == {"oversize": 2}
    assert "u3" in s.report.lines()[0]


def test_budget_defaults_to_batch_size_times_longest() -> None:
    frames = _frames()
    s = _sampler(frames, batch_size=8, seed=0)
    assert s.budget == 8 * frames.max()
    assert s.report.oversize == 0


def test_order_differs_across_epochs_and_repeats_for_the_same_seed() -> None:
    frames = _frames()
    a = _sampler(frames, max_frames=3000, seed=7)
    b = _sampler(frames, max_frames=3000, seed=7)
    c = _sampler(frames, max_frames=3000, seed=8)
    e0 = _epoch(a)
    assert e0 == _epoch(b)
    assert e0 != _epoch(c)
    a.advance()
    assert _epoch(a) != e0


@pytest.mark.parametrize("kw", [MODES[0], MODES[3], dict(max_frames=3000, world_size=2, rank=1)])
def test_resume_at_any_batch_gives_the_same_remaining_sequence(kw: dict) -> None:
    frames = _frames(120)
    full = _sampler(frames, seed=11, **kw)
    reference, states = [], []
    for _ in range(2):  # two epochs through the torch batch_sampler interface
        for batch in full:
            states.append(full.state_dict())  # state after consuming this batch
            reference.append(batch)
    for k in sorted({0, 1, len(reference) // 2, len(reference) - 2}):
        resumed = _sampler(frames, seed=11, **kw)
        resumed.load_state_dict(states[k])
        rest = []
        while len(rest) < len(reference) - k - 1:
            rest.extend(resumed)
        assert rest[: len(reference) - k - 1] == reference[k + 1 :]


def test_crop_mode_fixed_size_batches_and_offsets_in_range() -> None:
    frames = np.array([10, 50, 64, 100, 8, 70, 90, 33, 40, 64, 65])
    s = _sampler(frames, crop_frames=32, batch_size=4, crop_short="skip", seed=0)
    keys = s.epoch_keys()
    assert [len(k.indices) for k in keys] == [4, 4, 1]
    for k in keys:
        for i, o in zip(k.indices, k.offsets):
            assert 0 <= o <= frames[i] - 32
    assert s.report.crop_short == 2 and s.report.skipped == {"crop_short": 2}
    padded = _sampler(frames, crop_frames=32, batch_size=4, crop_short="pad", seed=0)
    assert sum(len(k.indices) for k in padded.epoch_keys()) == len(frames)
    assert padded.report.crop_short == 2 and padded.report.skipped == {}


def test_random_mode_is_fixed_count() -> None:
    s = _sampler(_frames(100), bucketing=False, batch_size=16, seed=0)
    sizes = [len(b) for b in _epoch(s)]
    assert sorted(sizes, reverse=True) == [16] * 6 + [4] and sorted(i for b in _epoch(s) for i in b) == list(range(100))


def test_equal_duration_boundaries() -> None:
    frames = _frames(5000)
    bounds = equal_duration_boundaries(frames, 5)
    bucket = np.searchsorted(bounds, frames, side="left")
    totals = np.array([frames[bucket == b].sum() for b in range(len(bounds))])
    assert len(bounds) == 5 and bounds[-1] == frames.max()
    assert np.all(np.abs(totals / totals.sum() - 0.2) < 0.02)


def test_explicit_buckets_and_batch_sizes() -> None:
    frames = _frames()
    s = _sampler(frames, bucket_boundaries=[200, 400, 650], bucket_batch_sizes=[12, 6, 3], max_frames=100, seed=0)
    assert s.report.oversize == int((frames > 650).sum()) > 0  # max_frames does not apply to tuned sizes
    assert s.budget == max(12 * 200, 6 * 400, 3 * 650)
    for k in s.epoch_keys():
        if k.bucket != OVERSIZE:
            assert len(k.indices) <= [12, 6, 3][k.bucket]
            assert frames[list(k.indices)].max() <= [200, 400, 650][k.bucket]
    with pytest.raises(ConfigError, match="bucket_batch_sizes"):
        _sampler(frames, bucket_boundaries=[200, 400, 650], bucket_batch_sizes=[12, 6])
    with pytest.raises(ConfigError, match="increasing"):
        _sampler(frames, bucket_boundaries=[400, 200])


def test_state_mismatch_is_a_clear_error() -> None:
    from speechtrain.errors import DataError

    s = _sampler(_frames(50), seed=0)
    state = s.state_dict()
    with pytest.raises(DataError, match="utterances"):
        _sampler(_frames(60), seed=0).load_state_dict(state)
    with pytest.raises(DataError, match="world_size"):
        _sampler(_frames(50), seed=0, rank=0, world_size=2).load_state_dict(state)


def test_resume_with_changed_batching_replans_and_says_so() -> None:
    frames = _frames(200)
    s = _sampler(frames, max_frames=3000, seed=0)
    s.position = len(s) // 2
    state = s.state_dict()
    other = _sampler(frames, max_frames=1500, seed=0)
    with pytest.warns(UserWarning, match="budget"):
        other.load_state_dict(state)
    assert other.resume_note and "budget" in other.resume_note
    assert abs(other.position / len(other) - 0.5) < 0.1


def test_rank_and_world_size_come_from_torch_distributed(tmp_path) -> None:  # noqa: ANN001
    import torch.distributed as dist

    from speechtrain.data.sampler import resolve_rank

    assert resolve_rank(None, None) == (0, 1) and resolve_rank(2, 3) == (2, 3)
    with pytest.raises(ConfigError):
        resolve_rank(3, 3)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert resolve_rank(None, None) == (0, 1)
        with pytest.raises(ConfigError, match="torch.distributed"):
            resolve_rank(1, 2)
    finally:
        dist.destroy_process_group()


def test_resume_after_a_data_filter_changed_replans_when_allowed() -> None:
    """Issue 14, defect 7: `data.max_duration` lowered to drop an utterance was refused on resume."""
    s = _sampler(_frames(60), seed=0)
    s.position = len(s) // 2
    state = s.state_dict()
    fewer = _sampler(_frames(60)[:59], seed=0)
    fewer.replan_changed_data = True  # what the training loader sets
    with pytest.warns(UserWarning, match="60 -> 59 utterances"):
        fewer.load_state_dict(state)
    assert abs(fewer.position / len(fewer) - 0.5) < 0.1
    batches = list(fewer)
    assert batches and max(i for b in batches for i in b) < 59
