"""Duration-bucketed batch sampler: batches sized in padded mel frames, exact resume, multi-rank.

The sampler works on an int array of mel frames per utterance, never on the dataset, so that
planning an epoch costs milliseconds and needs no audio.

How an epoch is planned (a pure function of ``seed``, ``epoch`` and the batches carried over from
the previous epoch, so that resuming recomputes the plan and starts at batch ``k``):

1. Utterances are put in buckets whose upper bounds (in frames) lie at duration quantiles with
   equal total duration per bucket (or ``bucket_boundaries``).
2. Inside a bucket the order is shuffled, then cut into pools of ``sort_pool`` batches; each pool
   is sorted by length and cut greedily into batches whose cost ``B x cost(longest)`` stays within
   the frame budget (``cost(L) = L + L^2 / quadratic_frames``), at most ``max_batch_size`` items
   (or exactly ``bucket_batch_sizes[b]`` items). Pools keep padding low while the composition of
   batches still changes from epoch to epoch.
3. Batches are grouped ``world_size`` at a time from the same bucket (so that ranks run batches
   of similar length at the same step), groups are shuffled, and rank ``r`` takes the ``r``-th
   batch of every group. The last incomplete group (at most ``world_size - 1`` batches) is carried
   into the next epoch (``rank_remainder="defer"``) or dropped and counted (``"drop_report"``).

Utterances too long for any batch (one item already over the budget, or longer than the last
explicit boundary) are reported by count and id, and get a batch of their own
(``oversize="own_batch"``) or are skipped and counted (``"skip"``).

Crop mode (``crop_frames``, vocoders): every item is a random segment of ``crop_frames`` frames,
so batches are fixed-size random batches of ``batch_size``; the segment offsets are drawn from
the same seeded generator, so a resumed run reads the same segments.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from speechtrain.config import ConfigError
from speechtrain.data.batch import round_up
from speechtrain.errors import DataError

OVERSIZE = -1  # bucket id of an oversize utterance's own batch


@dataclass(frozen=True)
class BatchKey:
    """One planned batch: utterance indices, crop offsets in frames (crop mode), and its bucket."""

    indices: tuple[int, ...]
    offsets: tuple[int, ...] | None = None
    bucket: int | None = None

    def to_list(self) -> list[Any]:
        return [list(self.indices), None if self.offsets is None else list(self.offsets), self.bucket]

    @classmethod
    def from_list(cls, raw: Sequence[Any]) -> BatchKey:
        indices, offsets, bucket = raw
        return cls(tuple(int(i) for i in indices), None if offsets is None else tuple(int(o) for o in offsets), bucket)


@dataclass
class EpochPlan:
    """The batches of one epoch for every rank, and what was carried over or left out."""

    epoch: int
    world_size: int
    groups: list[list[BatchKey]]  # each group holds one batch per rank, in step order
    remainder: list[BatchKey]  # incomplete last group: deferred or dropped
    carried_in: int = 0  # batches carried from the previous epoch into this one

    def for_rank(self, rank: int) -> list[BatchKey]:
        """Batches of ``rank`` in order."""
        return [g[rank] for g in self.groups]

    @property
    def batches_per_rank(self) -> int:
        return len(self.groups)

    def all_batches(self) -> list[BatchKey]:
        return [b for g in self.groups for b in g]


def item_cost(frames: np.ndarray | int, quadratic_frames: float | None) -> np.ndarray:
    """Memory cost of an item of ``frames`` frames: ``L`` or ``L + L^2 / quadratic_frames``."""
    f = np.asarray(frames, dtype=np.float64)
    return f + f * f / quadratic_frames if quadratic_frames else f


def equal_duration_boundaries(frames: np.ndarray, num_buckets: int) -> np.ndarray:
    """Upper bounds (frames, inclusive, increasing) of buckets holding equal total duration."""
    s = np.sort(np.asarray(frames, dtype=np.int64))
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    total = np.cumsum(s)
    cuts = [int(s[min(np.searchsorted(total, total[-1] * k / num_buckets), s.size - 1)]) for k in range(1, num_buckets)]
    return np.unique(np.array([*cuts, int(s[-1])], dtype=np.int64))


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Rank and world size: explicit values, else torch.distributed when initialised, else (0, 1)."""
    dist_rank = dist_world = None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist_rank, dist_world = dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover - torch always present in practice
        pass
    if world_size is None:
        world_size = dist_world if dist_world is not None else 1
    if rank is None:
        rank = dist_rank if dist_rank is not None and world_size == dist_world else 0
    if dist_world is not None and (world_size, rank) != (dist_world, dist_rank):
        raise ConfigError(
            f"rank {rank}/world_size {world_size} given, but torch.distributed says {dist_rank}/{dist_world}; "
            "leave rank and world_size unset to read them from torch.distributed"
        )
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank must be in [0, world_size): got rank={rank}, world_size={world_size}")
    return int(rank), int(world_size)


@dataclass
class SamplerReport:
    """What the sampler left out or treated specially, with ids (first 20) for the user."""

    oversize: int = 0
    oversize_ids: list[str] = field(default_factory=list)
    oversize_action: str = "own_batch"
    crop_short: int = 0
    crop_short_ids: list[str] = field(default_factory=list)
    crop_short_action: str = "pad"
    budget: float = 0.0

    @property
    def skipped(self) -> dict[str, int]:
        out = {}
        if self.oversize and self.oversize_action == "skip":
            out["oversize"] = self.oversize
        if self.crop_short and self.crop_short_action == "skip":
            out["crop_short"] = self.crop_short
        return out

    def lines(self) -> list[str]:
        out = []
        if self.oversize:
            how = "own batch each" if self.oversize_action == "own_batch" else "skipped"
            out.append(
                f"{self.oversize} utterance(s) longer than the frame budget ({self.budget:.0f}): {how}: "
                + ", ".join(self.oversize_ids[:20])
                + (" ..." if self.oversize > 20 else "")
            )
        if self.crop_short:
            how = "padded" if self.crop_short_action == "pad" else "skipped"
            out.append(
                f"{self.crop_short} utterance(s) shorter than crop_frames: {how}: "
                + ", ".join(self.crop_short_ids[:20])
                + (" ..." if self.crop_short > 20 else "")
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "oversize": self.oversize,
            "oversize_action": self.oversize_action,
            "oversize_ids": self.oversize_ids[:20],
            "crop_short": self.crop_short,
            "crop_short_action": self.crop_short_action,
            "crop_short_ids": self.crop_short_ids[:20],
            "skipped": self.skipped,
        }


class BucketBatchSampler:
    """Batches of utterance indices sized in padded frames, reproducible from ``seed`` and epoch.

    Iterating yields lists of indices for this rank, from the current position to the end of the
    epoch (usable as a ``torch.utils.data.DataLoader`` ``batch_sampler``); :meth:`epoch_keys`
    gives the same batches as :class:`BatchKey` (with crop offsets). ``state_dict()`` holds the
    epoch, the position in it and the carried batches: nothing else is needed to resume exactly.
    """

    def __init__(
        self,
        frames: Sequence[int] | np.ndarray,
        *,
        batch_size: int = 16,
        bucketing: bool = True,
        max_frames: int | None = None,
        quadratic_frames: float | None = None,
        num_buckets: int = 10,
        max_batch_size: int = 64,
        bucket_batch_sizes: Sequence[int] | None = None,
        bucket_boundaries: Sequence[int] | None = None,
        sort_pool: int = 16,
        oversize: Literal["own_batch", "skip"] = "own_batch",
        crop_frames: int | None = None,
        crop_short: Literal["pad", "skip"] = "pad",
        pad_multiple: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        rank_remainder: Literal["defer", "drop_report"] = "defer",
        ids: Sequence[str] | None = None,
    ) -> None:
        self.frames = np.asarray(frames, dtype=np.int64)
        if self.frames.ndim != 1:
            raise DataError(f"frames must be a 1-D array of mel frames per utterance, got shape {self.frames.shape}")
        if self.frames.size and self.frames.min() < 1:
            bad = int(np.argmin(self.frames))
            raise DataError(f"utterance {self._id(ids, bad)} has {self.frames[bad]} frames; every item needs >= 1")
        self.ids = list(ids) if ids is not None else None
        self.batch_size, self.bucketing = int(batch_size), bool(bucketing)
        self.max_frames, self.quadratic_frames = max_frames, quadratic_frames
        self.max_batch_size, self.sort_pool = int(max_batch_size), max(1, int(sort_pool))
        self.num_buckets = int(num_buckets)
        self.oversize, self.crop_frames, self.crop_short = oversize, crop_frames, crop_short
        self.pad_multiple, self.shuffle, self.seed = int(pad_multiple), bool(shuffle), int(seed)
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.rank_remainder = rank_remainder
        self.report = SamplerReport(oversize_action=oversize, crop_short_action=crop_short)
        self.mode = "crop" if crop_frames else ("bucketed" if bucketing else "random")
        self._setup(bucket_boundaries, bucket_batch_sizes)
        # resumable state
        self.epoch = 0
        self.position = 0
        self.carried: list[BatchKey] = []
        self.dropped = 0  # batches (and items) dropped by rank_remainder="drop_report"
        self.dropped_items = 0
        self._plan: EpochPlan | None = None
        self.resume_note: str | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        data_cfg: Any,
        frames: Sequence[int] | np.ndarray,
        *,
        seed: int = 0,
        ids: Sequence[str] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> BucketBatchSampler:
        """Build from a :class:`speechtrain.config.DataConfig` (``seed`` is ``train.seed``)."""
        d = data_cfg
        return cls(
            frames,
            batch_size=d.batch_size,
            bucketing=d.bucketing,
            max_frames=d.max_frames,
            quadratic_frames=d.quadratic_frames,
            num_buckets=d.num_buckets,
            max_batch_size=d.max_batch_size,
            bucket_batch_sizes=d.bucket_batch_sizes,
            bucket_boundaries=d.bucket_boundaries,
            sort_pool=d.sort_pool,
            oversize=d.oversize,
            crop_frames=d.crop_frames,
            crop_short=d.crop_short,
            pad_multiple=d.pad_multiple,
            shuffle=d.shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            rank_remainder=d.rank_remainder,
            ids=ids,
        )

    @staticmethod
    def _id(ids: Sequence[str] | None, i: int) -> str:
        return str(ids[i]) if ids is not None else f"#{i}"

    def _ids(self, index: np.ndarray) -> list[str]:
        return [self._id(self.ids, int(i)) for i in index]

    def padded(self, frames: np.ndarray | int) -> np.ndarray:
        """Padded length of a batch whose longest item has ``frames`` frames."""
        f = np.asarray(frames, dtype=np.int64)
        m = self.pad_multiple
        return -(-f // m) * m if m > 1 else f

    def batch_cost(self, lengths: np.ndarray) -> float:
        """Cost of a batch: items x cost of the padded longest item."""
        if len(lengths) == 0:
            return 0.0
        if self.crop_frames:
            return float(len(lengths) * item_cost(round_up(self.crop_frames, self.pad_multiple), self.quadratic_frames))
        return float(len(lengths) * item_cost(self.padded(int(np.max(lengths))), self.quadratic_frames))

    def _setup(self, boundaries: Sequence[int] | None, sizes: Sequence[int] | None) -> None:
        n = self.frames.size
        self.bucket_sizes: np.ndarray | None = None
        self.boundaries = np.zeros(0, dtype=np.int64)
        self.bucket_of = np.zeros(n, dtype=np.int64)
        usable = np.ones(n, dtype=bool)
        if self.mode == "crop":
            short = np.flatnonzero(self.frames < self.crop_frames)
            self.report.crop_short, self.report.crop_short_ids = int(short.size), self._ids(short[:20])
            if self.crop_short == "skip":
                usable[short] = False
            self.budget = float(self.batch_size * item_cost(self.crop_frames, self.quadratic_frames))
        elif self.mode == "random":
            self.budget = float("inf")
        else:
            longest = int(self.frames.max()) if n else 1
            cost = item_cost(self.padded(self.frames), self.quadratic_frames)
            if self.max_frames is not None:
                self.budget = float(self.max_frames)
            else:
                self.budget = float(self.batch_size * item_cost(self.padded(longest), self.quadratic_frames))
            # explicit per-bucket sizes were measured up to each bucket's bound: no frame budget applies
            over = cost > self.budget if sizes is None else np.zeros(n, dtype=bool)
            if boundaries is not None:
                b = np.asarray(boundaries, dtype=np.int64)
                if b.size == 0 or np.any(np.diff(b) <= 0):
                    raise ConfigError(f"data.bucket_boundaries must be increasing frame counts, got {list(boundaries)}")
                over |= self.frames > b[-1]
                self.boundaries = b
            else:
                self.boundaries = equal_duration_boundaries(self.frames[~over], self.num_buckets)
            if sizes is not None:
                if len(sizes) != len(self.boundaries) or min(sizes) < 1:
                    raise ConfigError(
                        f"data.bucket_batch_sizes has {len(sizes)} entries {list(sizes)} but there are "
                        f"{len(self.boundaries)} buckets (bounds {self.boundaries.tolist()}); give one size >= 1 per "
                        "bucket, or set data.bucket_boundaries to the bounds the sizes were tuned for"
                    )
                self.bucket_sizes = np.asarray(sizes, dtype=np.int64)
                per_bucket = self.bucket_sizes * item_cost(self.padded(self.boundaries), self.quadratic_frames)
                self.budget = float(per_bucket.max())  # the largest batch cost the tuned plan allows
            self.bucket_of = np.searchsorted(self.boundaries, self.frames, side="left").astype(np.int64)
            self.bucket_of[over] = OVERSIZE
            oversize = np.flatnonzero(over)
            self.report.oversize, self.report.oversize_ids = int(oversize.size), self._ids(oversize[:20])
            if self.oversize == "skip":
                usable[over] = False
        self.report.budget = self.budget
        self.usable = np.flatnonzero(usable)

    # ------------------------------------------------------------------ planning (pure)
    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.seed % 2**32, int(epoch)]))

    def _perm(self, rng: np.random.Generator, items: np.ndarray) -> np.ndarray:
        return rng.permutation(items) if self.shuffle else items

    def bucket_capacity(self, bucket: int) -> int:
        """Items per batch for a bucket's longest allowed item (the pool size unit)."""
        if self.bucket_sizes is not None:
            return int(self.bucket_sizes[bucket])
        per_item = item_cost(self.padded(int(self.boundaries[bucket])), self.quadratic_frames)
        return int(max(1, min(self.max_batch_size, self.budget // per_item)))

    def _cut_sorted(self, idx: np.ndarray, bucket: int) -> list[np.ndarray]:
        """Cut indices sorted by decreasing length into batches within the budget."""
        out = []
        i, n = 0, idx.size
        lengths = self.frames[idx]
        fixed = self.bucket_sizes[bucket] if self.bucket_sizes is not None else None
        while i < n:
            if fixed is not None:
                take = int(fixed)
            else:
                per_item = item_cost(self.padded(int(lengths[i])), self.quadratic_frames)
                take = int(max(1, min(self.max_batch_size, self.budget // per_item)))
            out.append(idx[i : i + take])
            i += take
        return out

    def _bucket_batches(self, rng: np.random.Generator, bucket: int, members: np.ndarray) -> list[np.ndarray]:
        members = self._perm(rng, members)
        pool = self.sort_pool * self.bucket_capacity(bucket)
        batches = []
        for start in range(0, members.size, pool):
            chunk = members[start : start + pool]
            # stable sort of a shuffled chunk: equal lengths stay in random order
            chunk = chunk[np.argsort(-self.frames[chunk], kind="stable")]
            batches.extend(self._cut_sorted(chunk, bucket))
        return batches

    def _fresh_batches(self, epoch: int) -> tuple[dict[int, list[BatchKey]], np.random.Generator]:
        """Batches of the epoch's own utterances, by bucket (one pseudo-bucket outside bucketed mode)."""
        rng = self._rng(epoch)
        by_bucket: dict[int, list[BatchKey]] = {}
        if self.mode == "bucketed":
            items = self.usable
            for b in range(len(self.boundaries)):
                members = items[self.bucket_of[items] == b]
                by_bucket[b] = [BatchKey(tuple(x.tolist()), None, b) for x in self._bucket_batches(rng, b, members)]
            big = items[self.bucket_of[items] == OVERSIZE]
            by_bucket[OVERSIZE] = [BatchKey((int(i),), None, OVERSIZE) for i in self._perm(rng, big)]
        else:
            order = self._perm(rng, self.usable)
            offsets = None
            if self.mode == "crop":
                room = np.maximum(self.frames[order] - self.crop_frames, 0)
                offsets = (rng.random(order.size) * (room + 1)).astype(np.int64)
            batches = []
            for s in range(0, order.size, self.batch_size):
                off = None if offsets is None else tuple(offsets[s : s + self.batch_size].tolist())
                batches.append(BatchKey(tuple(order[s : s + self.batch_size].tolist()), off, 0))
            by_bucket[0] = batches
        return by_bucket, rng

    def plan(self, epoch: int, carried: Sequence[BatchKey] = ()) -> EpochPlan:
        """The whole epoch for every rank: a pure function of seed, epoch and ``carried``."""
        w = self.world_size
        by_bucket, rng = self._fresh_batches(epoch)
        groups: list[list[BatchKey]] = []
        leftovers: list[BatchKey] = list(carried)
        for b in sorted(by_bucket):
            batches = by_bucket[b]
            full = len(batches) // w * w
            groups.extend(batches[i : i + w] for i in range(0, full, w))
            leftovers.extend(batches[full:])
        if self.shuffle and len(leftovers) > 1:
            leftovers = [leftovers[i] for i in rng.permutation(len(leftovers))]
        full = len(leftovers) // w * w
        groups.extend(leftovers[i : i + w] for i in range(0, full, w))
        remainder = leftovers[full:]
        if self.shuffle:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        return EpochPlan(epoch, w, groups, remainder, carried_in=len(carried))

    # ------------------------------------------------------------------ iteration and state
    def current_plan(self) -> EpochPlan:
        """The plan of the current epoch (cached)."""
        if self._plan is None or self._plan.epoch != self.epoch:
            self._plan = self.plan(self.epoch, self.carried)
            if self._plan.batches_per_rank == 0 and self.rank_remainder == "drop_report":
                raise DataError(
                    f"an epoch has {len(self._plan.remainder)} batch(es) for {self.world_size} ranks: no rank gets "
                    "a batch; lower data.max_frames / data.batch_size, use fewer ranks, or add data"
                )
        return self._plan

    def __len__(self) -> int:
        """Batches of this rank in the current epoch."""
        return self.current_plan().batches_per_rank

    def epoch_keys(self) -> list[BatchKey]:
        """This rank's batches of the current epoch, from the current position on."""
        return self.current_plan().for_rank(self.rank)[self.position :]

    def advance(self) -> None:
        """Move to the next epoch, carrying (or dropping and counting) the rank remainder."""
        plan = self.current_plan()
        if self.rank_remainder == "defer":
            self.carried = list(plan.remainder)
        else:
            self.carried = []
            self.dropped += len(plan.remainder)
            self.dropped_items += sum(len(k.indices) for k in plan.remainder)
        self.epoch += 1
        self.position = 0
        self._plan = None
        guard = 0
        while self.current_plan().batches_per_rank == 0:  # tiny data with many ranks: accumulate
            guard += 1
            if guard > 10 * self.world_size:
                raise DataError("the data is too small to give every rank a batch; add data or use fewer ranks")
            self.carried = list(self.current_plan().remainder)
            self.epoch += 1
            self._plan = None

    def set_epoch(self, epoch: int) -> None:
        """Go forward to ``epoch`` (epochs only go forward; use load_state_dict to go back)."""
        if epoch < self.epoch:
            raise ValueError(f"set_epoch({epoch}) is behind the sampler's epoch {self.epoch}; use load_state_dict")
        while self.epoch < epoch:
            self.advance()

    def __iter__(self) -> Iterator[list[int]]:
        if self.position >= len(self):
            self.advance()
        for key in self.epoch_keys():
            self.position += 1
            yield list(key.indices)

    def settings(self) -> dict[str, Any]:
        """What shapes the plan besides seed and epoch (saved with the state to detect changes)."""
        return {
            "mode": self.mode,
            "budget": None if not np.isfinite(self.budget) else float(self.budget),
            "boundaries": [int(b) for b in self.boundaries],
            "bucket_sizes": None if self.bucket_sizes is None else [int(b) for b in self.bucket_sizes],
            "batch_size": self.batch_size,
            "max_batch_size": self.max_batch_size,
            "quadratic_frames": self.quadratic_frames,
            "sort_pool": self.sort_pool,
            "pad_multiple": self.pad_multiple,
            "crop_frames": self.crop_frames,
            "shuffle": self.shuffle,
            "usable": int(self.usable.size),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings(),
            "epoch_batches": len(self),
            "epoch": self.epoch,
            "position": self.position,
            "carried": [k.to_list() for k in self.carried],
            "dropped": self.dropped,
            "dropped_items": self.dropped_items,
            "seed": self.seed,
            "world_size": self.world_size,
            "mode": self.mode,
            "num_items": int(self.frames.size),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("num_items", self.frames.size) != self.frames.size:
            raise DataError(
                f"sampler state is for {state['num_items']} utterances but the data has {self.frames.size}; "
                "resume with the same prepared data"
            )
        if state.get("world_size", self.world_size) != self.world_size:
            raise DataError(
                f"sampler state was saved with world_size {state['world_size']}, now {self.world_size}: the epoch "
                "plan differs; resume with the same number of ranks"
            )
        self.seed = int(state.get("seed", self.seed))
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.carried = [BatchKey.from_list(k) for k in state.get("carried", [])]
        self.dropped = int(state.get("dropped", 0))
        self.dropped_items = int(state.get("dropped_items", 0))
        self._plan = None
        old = state.get("settings")
        if old is not None and old != self.settings():
            self._resume_with_new_settings(old, state)

    def _resume_with_new_settings(self, old: dict[str, Any], state: dict[str, Any]) -> None:
        """Batching changed since the checkpoint (e.g. after `speechtrain tune`): re-plan the epoch
        and resume at the same fraction of it; said in ``resume_note`` and a warning."""
        import warnings

        changed = sorted(k for k in old if old[k] != self.settings().get(k))
        if old.get("mode") != self.mode and self.carried:
            self.dropped += len(self.carried)
            self.dropped_items += sum(len(k.indices) for k in self.carried)
            self.carried = []
        old_len = max(1, int(state.get("epoch_batches", 1)))
        new_len = len(self)
        new_pos = min(new_len, round(self.position * new_len / old_len))
        self.resume_note = (
            f"batching settings changed since the checkpoint ({', '.join(changed)}): epoch {self.epoch} was "
            f"re-planned and resumes at batch {new_pos} of {new_len} (was {self.position} of {old_len}); "
            "the rest of this epoch is not exactly the interrupted run's"
        )
        self.position = new_pos
        warnings.warn(self.resume_note, stacklevel=3)
