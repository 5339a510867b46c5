"""What goes in a batch: the :class:`FrameBudget` and one planner per batching strategy.

A planner works on an int array of mel frames per utterance, never on the dataset, so that planning
an epoch costs milliseconds and needs no audio. Given the epoch's random generator it returns the
epoch's batches (:class:`BatchKey`) grouped by bucket; :class:`~speechtrain.data.sampler.BucketBatchSampler`
then deals them out to ranks and keeps the position for an exact resume.

- :class:`BucketedPlanner` (``data.bucketing``): utterances go into buckets whose upper bounds lie
  at equal-total-duration quantiles (or ``bucket_boundaries``). Inside a bucket the order is
  shuffled, then cut into pools of ``sort_pool`` batches; each pool is sorted by length and cut
  greedily into batches whose cost ``B x cost(padded longest)`` stays within the frame budget, at
  most ``max_batch_size`` items (or exactly ``bucket_batch_sizes[b]`` items, as ``speechtrain tune``
  measured them). Pools keep padding low while the batches still change from epoch to epoch.
  Utterances too long for any batch get a batch of their own or are skipped (``oversize``), and are
  reported by count and id.
- :class:`FixedCountPlanner` (``data.bucketing=false``): random batches of ``batch_size`` items.
- :class:`CropPlanner` (``data.crop_frames``, vocoders): random batches of ``batch_size`` random
  segments of ``crop_frames`` frames; the segment offsets come from the same seeded generator, so a
  resumed run reads the same segments. Items shorter than a crop are padded or skipped (``crop_short``).

The cost of an item of ``L`` frames is ``L`` or, for attention models, ``L + L^2 / quadratic_frames``
(:func:`item_cost`); ``L`` is first rounded up to ``pad_multiple``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from speechtrain.config import ConfigError
from speechtrain.data.batch import round_up
from speechtrain.errors import DataError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

OVERSIZE = -1  # bucket id of an oversize utterance's own batch


class Oversize(StrEnum):
    """What happens to an utterance longer than the frame budget."""

    OWN_BATCH = "own_batch"
    SKIP = "skip"


class CropShort(StrEnum):
    """What happens to an utterance shorter than ``crop_frames``."""

    PAD = "pad"
    SKIP = "skip"


class PlanKind(StrEnum):
    """The batching strategy (the values are the ``mode`` of sampler state dicts)."""

    BUCKETED = "bucketed"
    FIXED_COUNT = "random"
    CROP = "crop"


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


AUTO_BUCKETS_MAX = 32  # most buckets the automatic choice tries
AUTO_BATCHES_PER_BUCKET = 2  # each bucket keeps at least this many batches on average, so batches still mix
AUTO_SEED = 0  # the choice plans one epoch from this fixed seed: the same corpus always gets the same count


@dataclass(frozen=True)
class FrameBudget:
    """How much one batch may hold, in padded mel frames, and the item caps.

    ``max_frames``: the budget in item costs (B x cost(padded longest)); None: ``batch_size`` x the
    cost of the corpus's longest item. ``batch_size``: items per batch of the fixed-count and crop
    planners. ``max_batch_size``: cap on items per bucketed batch. ``quadratic_frames``: adds
    ``L^2/quadratic_frames`` to an item's cost (attention). ``pad_multiple``: padded lengths are
    rounded up to it. ``oversize``: an utterance over the budget gets its own batch or is skipped.
    """

    max_frames: int | None = None
    batch_size: int = 16
    max_batch_size: int = 64
    quadratic_frames: float | None = None
    pad_multiple: int = 1
    oversize: Oversize = Oversize.OWN_BATCH

    @classmethod
    def from_data(cls, data: DataConfig) -> FrameBudget:
        """The budget of a :class:`speechtrain.config.DataConfig`."""
        return cls(
            max_frames=data.max_frames,
            batch_size=data.batch_size,
            max_batch_size=data.max_batch_size,
            quadratic_frames=data.quadratic_frames,
            pad_multiple=data.pad_multiple,
            oversize=Oversize(data.oversize),
        )

    def padded(self, frames: np.ndarray | int) -> np.ndarray:
        """Padded length of a batch whose longest item has ``frames`` frames."""
        f = np.asarray(frames, dtype=np.int64)
        m = self.pad_multiple
        return -(-f // m) * m if m > 1 else f

    def cost(self, frames: np.ndarray | int) -> np.ndarray:
        """Cost of one item in a batch whose longest item has ``frames`` frames."""
        return item_cost(self.padded(frames), self.quadratic_frames)

    def limit(self, longest: int) -> float:
        """The budget in item costs for a corpus whose longest item has ``longest`` frames."""
        if self.max_frames is not None:
            return float(self.max_frames)
        return float(self.batch_size * self.cost(longest))

    def items_within(self, limit: float, longest: int) -> int:
        """Items of a batch whose longest item has ``longest`` frames: as many as ``limit`` allows,
        at least 1, at most ``max_batch_size``."""
        return max(1, min(int(self.max_batch_size), int(limit // float(self.cost(longest)))))


@dataclass
class SamplerReport:
    """What the planner left out or treated specially, with ids (first 20) for the user."""

    oversize: int = 0
    oversize_ids: list[str] = field(default_factory=list)
    oversize_action: Oversize = Oversize.OWN_BATCH
    crop_short: int = 0
    crop_short_ids: list[str] = field(default_factory=list)
    crop_short_action: CropShort = CropShort.PAD
    budget: float = 0.0
    auto_buckets: list[tuple[int, float]] | None = None  # (buckets, planned padding) tried by data.num_buckets=auto

    @property
    def skipped(self) -> dict[str, int]:
        out = {}
        if self.oversize and self.oversize_action == Oversize.SKIP:
            out["oversize"] = self.oversize
        if self.crop_short and self.crop_short_action == CropShort.SKIP:
            out["crop_short"] = self.crop_short
        return out

    def lines(self) -> list[str]:
        out = []
        if self.oversize:
            how = "own batch each" if self.oversize_action == Oversize.OWN_BATCH else "skipped"
            out.append(
                f"{self.oversize} utterance(s) longer than the frame budget ({self.budget:.0f}): {how}: "
                + ", ".join(self.oversize_ids[:20])
                + (" ..." if self.oversize > 20 else "")
            )
        if self.crop_short:
            how = "padded" if self.crop_short_action == CropShort.PAD else "skipped"
            out.append(
                f"{self.crop_short} utterance(s) shorter than crop_frames: {how}: "
                + ", ".join(self.crop_short_ids[:20])
                + (" ..." if self.crop_short > 20 else "")
            )
        if self.auto_buckets:
            n, pad = self.auto_buckets[-1]
            tried = ", ".join(f"{k}: {p:.1%}" for k, p in self.auto_buckets)
            out.append(f"data.num_buckets=auto chose {n} bucket(s) ({pad:.1%} padding; tried {tried})")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "auto_buckets": self.auto_buckets,
            "oversize": self.oversize,
            "oversize_action": str(self.oversize_action),
            "oversize_ids": self.oversize_ids[:20],
            "crop_short": self.crop_short,
            "crop_short_action": str(self.crop_short_action),
            "crop_short_ids": self.crop_short_ids[:20],
            "skipped": self.skipped,
        }


class Planner(ABC):
    """A batching strategy over mel frames per utterance (see the module docstring).

    ``usable``: indices of the utterances the planner batches; ``limit``: the largest batch cost
    it plans (inf when it plans by count); ``report``: what it left out.
    """

    kind: ClassVar[PlanKind]

    def __init__(
        self,
        frames: Sequence[int] | np.ndarray,
        budget: FrameBudget,
        *,
        shuffle: bool = True,
        ids: Sequence[str] | None = None,
    ) -> None:
        self.frames = np.asarray(frames, dtype=np.int64)
        if self.frames.ndim != 1:
            raise DataError(f"frames must be a 1-D array of mel frames per utterance, got shape {self.frames.shape}")
        if self.frames.size and self.frames.min() < 1:
            bad = int(np.argmin(self.frames))
            raise DataError(f"utterance {_name(ids, bad)} has {self.frames[bad]} frames; every item needs >= 1")
        self.budget = budget
        self.shuffle = bool(shuffle)
        self.ids = list(ids) if ids is not None else None
        self.usable = np.arange(self.frames.size)
        self.limit = float("inf")
        self.report = SamplerReport(oversize_action=budget.oversize, budget=self.limit)

    @abstractmethod
    def batches(self, rng: np.random.Generator) -> dict[int, list[BatchKey]]:
        """The epoch's batches by bucket (one pseudo-bucket 0 outside bucketing), drawing from ``rng``."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """What shapes the plan besides seed and epoch (saved with sampler state to detect changes)."""

    def batch_cost(self, lengths: np.ndarray) -> float:
        """Cost of a batch of items of these lengths: items x cost of the padded longest item."""
        if len(lengths) == 0:
            return 0.0
        return float(len(lengths) * self.budget.cost(int(np.max(lengths))))

    @property
    def boundaries(self) -> np.ndarray:
        """Bucket upper bounds in frames (empty outside bucketing)."""
        return np.zeros(0, dtype=np.int64)

    def _perm(self, rng: np.random.Generator, items: np.ndarray) -> np.ndarray:
        return rng.permutation(items) if self.shuffle else items

    def _ids(self, index: np.ndarray) -> list[str]:
        return [_name(self.ids, int(i)) for i in index]

    def _limit_setting(self) -> float | None:
        return None if not np.isfinite(self.limit) else float(self.limit)


def _name(ids: Sequence[str] | None, i: int) -> str:
    return str(ids[i]) if ids is not None else f"#{i}"


def _count_batches(order: np.ndarray, size: int, offsets: np.ndarray | None) -> list[BatchKey]:
    """``order`` cut into batches of ``size`` (the last one shorter), all in pseudo-bucket 0."""
    out = []
    for s in range(0, order.size, size):
        off = None if offsets is None else tuple(offsets[s : s + size].tolist())
        out.append(BatchKey(tuple(order[s : s + size].tolist()), off, 0))
    return out


class BucketedPlanner(Planner):
    """Duration-bucketed batches sized in padded frames (see the module docstring)."""

    kind = PlanKind.BUCKETED

    def __init__(
        self,
        frames: Sequence[int] | np.ndarray,
        budget: FrameBudget = FrameBudget(),
        *,
        num_buckets: int | None = None,
        bucket_boundaries: Sequence[int] | None = None,
        bucket_batch_sizes: Sequence[int] | None = None,
        sort_pool: int = 16,
        shuffle: bool = True,
        ids: Sequence[str] | None = None,
        padding_target: float = 0.02,
    ) -> None:
        super().__init__(frames, budget, shuffle=shuffle, ids=ids)
        self.sort_pool = max(1, int(sort_pool))
        self.padding_target = float(padding_target)
        self.bucket_sizes: np.ndarray | None = None
        n = self.frames.size
        longest = int(self.frames.max()) if n else 1
        cost = budget.cost(self.frames)
        self.limit = budget.limit(longest)
        # explicit per-bucket sizes were measured up to each bucket's bound: no frame budget applies
        over = cost > self.limit if bucket_batch_sizes is None else np.zeros(n, dtype=bool)
        if bucket_boundaries is not None:
            b = np.asarray(bucket_boundaries, dtype=np.int64)
            if b.size == 0 or np.any(np.diff(b) <= 0):
                raise ConfigError(
                    f"data.bucket_boundaries must be increasing frame counts, got {list(bucket_boundaries)}"
                )
            over |= self.frames > b[-1]
            self._boundaries = b
        elif num_buckets is not None:
            self._boundaries = equal_duration_boundaries(self.frames[~over], int(num_buckets))
        elif bucket_batch_sizes is not None:  # tuned sizes without their bounds: one bucket per size
            self._boundaries = equal_duration_boundaries(self.frames[~over], len(bucket_batch_sizes))
        else:
            self._boundaries = self._auto_boundaries(over)
        self.num_buckets = len(self._boundaries)
        if bucket_batch_sizes is not None:
            sizes = list(bucket_batch_sizes)
            if len(sizes) != len(self._boundaries) or min(sizes) < 1:
                raise ConfigError(
                    f"data.bucket_batch_sizes has {len(sizes)} entries {sizes} but there are "
                    f"{len(self._boundaries)} buckets (bounds {self._boundaries.tolist()}); give one size >= 1 per "
                    "bucket, or set data.bucket_boundaries to the bounds the sizes were tuned for"
                )
            self.bucket_sizes = np.asarray(sizes, dtype=np.int64)
            per_bucket = self.bucket_sizes * budget.cost(self._boundaries)
            self.limit = float(per_bucket.max())  # the largest batch cost the tuned plan allows
        self.bucket_of = np.searchsorted(self._boundaries, self.frames, side="left").astype(np.int64)
        self.bucket_of[over] = OVERSIZE
        oversize = np.flatnonzero(over)
        self.report.oversize, self.report.oversize_ids = int(oversize.size), self._ids(oversize[:20])
        if budget.oversize == Oversize.SKIP:
            self.usable = np.flatnonzero(~over)
        self.report.budget = self.limit

    def _auto_boundaries(self, over: np.ndarray) -> np.ndarray:
        """The fewest equal-duration buckets whose planned padding is within ``padding_target``.

        Fewer buckets mean batches that mix more utterances and fewer distinct shapes (fewer
        compiles, fewer sizes to tune); more buckets mean less padding. Every count from 1 up to
        :data:`AUTO_BUCKETS_MAX` (and at most one bucket per :data:`AUTO_BATCHES_PER_BUCKET` batches of
        the corpus) is planned once from a fixed seed, which costs milliseconds; when none reaches
        the target, the count with the least padding wins.
        """
        frames = self.frames[~over]
        if frames.size == 0:
            return equal_duration_boundaries(frames, 1)
        per_batch = self.budget.items_within(self.limit, int(np.median(frames)))
        most = int(np.clip(frames.size // max(1, AUTO_BATCHES_PER_BUCKET * per_batch), 1, AUTO_BUCKETS_MAX))
        best: tuple[float, np.ndarray] | None = None
        tried: list[tuple[int, float]] = []
        for k in range(1, most + 1):
            bounds = equal_duration_boundaries(frames, k)
            if best is not None and bounds.size == best[1].size:
                continue  # duplicate quantiles: the same buckets as a smaller count
            trial = BucketedPlanner(
                self.frames, self.budget, bucket_boundaries=bounds.tolist(), sort_pool=self.sort_pool, shuffle=True
            )
            padding = trial.padding(np.random.default_rng(AUTO_SEED))
            tried.append((int(bounds.size), padding))
            if best is None or padding < best[0]:
                best = (padding, bounds)
            if padding <= self.padding_target:
                best = (padding, bounds)
                break
        assert best is not None
        self.report.auto_buckets = tried
        return best[1]

    def padding(self, rng: np.random.Generator) -> float:
        """Padded fraction of the frames of one epoch planned from ``rng``."""
        real = padded = 0
        for keys in self.batches(rng).values():
            for key in keys:
                lengths = self.frames[list(key.indices)]
                real += int(lengths.sum())
                padded += int(self.budget.padded(int(lengths.max()))) * lengths.size
        return 0.0 if padded == 0 else 1.0 - real / padded

    @classmethod
    def from_data(
        cls, data: DataConfig, frames: Sequence[int] | np.ndarray, ids: Sequence[str] | None = None
    ) -> BucketedPlanner:
        return cls(
            frames,
            FrameBudget.from_data(data),
            num_buckets=None if data.num_buckets == "auto" else int(data.num_buckets),
            bucket_boundaries=data.bucket_boundaries,
            bucket_batch_sizes=data.bucket_batch_sizes,
            sort_pool=data.sort_pool,
            shuffle=data.shuffle,
            ids=ids,
            padding_target=data.bucket_padding_target,
        )

    @property
    def boundaries(self) -> np.ndarray:
        return self._boundaries

    def bucket_capacity(self, bucket: int) -> int:
        """Items per batch for a bucket's longest allowed item (the pool size unit)."""
        if self.bucket_sizes is not None:
            return int(self.bucket_sizes[bucket])
        return self.budget.items_within(self.limit, int(self._boundaries[bucket]))

    def _cut_sorted(self, idx: np.ndarray, bucket: int) -> list[np.ndarray]:
        """Cut indices sorted by decreasing length into batches within the budget."""
        out = []
        i, n = 0, idx.size
        lengths = self.frames[idx]
        fixed = self.bucket_sizes[bucket] if self.bucket_sizes is not None else None
        while i < n:
            take = int(fixed) if fixed is not None else self.budget.items_within(self.limit, int(lengths[i]))
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

    def batches(self, rng: np.random.Generator) -> dict[int, list[BatchKey]]:
        by_bucket: dict[int, list[BatchKey]] = {}
        items = self.usable
        for b in range(len(self._boundaries)):
            members = items[self.bucket_of[items] == b]
            by_bucket[b] = [BatchKey(tuple(x.tolist()), None, b) for x in self._bucket_batches(rng, b, members)]
        big = items[self.bucket_of[items] == OVERSIZE]
        by_bucket[OVERSIZE] = [BatchKey((int(i),), None, OVERSIZE) for i in self._perm(rng, big)]
        return by_bucket

    def settings(self) -> dict[str, Any]:
        return {
            "mode": str(self.kind),
            "budget": self._limit_setting(),
            "boundaries": [int(b) for b in self._boundaries],
            "bucket_sizes": None if self.bucket_sizes is None else [int(b) for b in self.bucket_sizes],
            "max_batch_size": self.budget.max_batch_size,
            "quadratic_frames": self.budget.quadratic_frames,
            "sort_pool": self.sort_pool,
            "pad_multiple": self.budget.pad_multiple,
            "shuffle": self.shuffle,
            "usable": int(self.usable.size),
        }


class FixedCountPlanner(Planner):
    """Random batches of ``budget.batch_size`` items (the plain baseline; no frame budget)."""

    kind = PlanKind.FIXED_COUNT

    @classmethod
    def from_data(
        cls, data: DataConfig, frames: Sequence[int] | np.ndarray, ids: Sequence[str] | None = None
    ) -> FixedCountPlanner:
        return cls(frames, FrameBudget.from_data(data), shuffle=data.shuffle, ids=ids)

    def batches(self, rng: np.random.Generator) -> dict[int, list[BatchKey]]:
        return {0: _count_batches(self._perm(rng, self.usable), self.budget.batch_size, None)}

    def settings(self) -> dict[str, Any]:
        return {
            "mode": str(self.kind),
            "batch_size": self.budget.batch_size,
            "shuffle": self.shuffle,
            "usable": int(self.usable.size),
        }


class CropPlanner(Planner):
    """Random batches of ``budget.batch_size`` random ``crop_frames`` segments (vocoders)."""

    kind = PlanKind.CROP

    def __init__(
        self,
        frames: Sequence[int] | np.ndarray,
        budget: FrameBudget,
        *,
        crop_frames: int,
        crop_short: CropShort = CropShort.PAD,
        shuffle: bool = True,
        ids: Sequence[str] | None = None,
    ) -> None:
        super().__init__(frames, budget, shuffle=shuffle, ids=ids)
        self.crop_frames = int(crop_frames)
        self.crop_short = CropShort(crop_short)
        self.report.crop_short_action = self.crop_short
        short = np.flatnonzero(self.frames < self.crop_frames)
        self.report.crop_short, self.report.crop_short_ids = int(short.size), self._ids(short[:20])
        if self.crop_short == CropShort.SKIP:
            self.usable = np.flatnonzero(self.frames >= self.crop_frames)
        self.limit = float(budget.batch_size * item_cost(self.crop_frames, budget.quadratic_frames))
        self.report.budget = self.limit

    @classmethod
    def from_data(
        cls, data: DataConfig, frames: Sequence[int] | np.ndarray, ids: Sequence[str] | None = None
    ) -> CropPlanner:
        if not data.crop_frames:
            raise ConfigError("the crop planner needs data.crop_frames")
        return cls(
            frames,
            FrameBudget.from_data(data),
            crop_frames=data.crop_frames,
            crop_short=CropShort(data.crop_short),
            shuffle=data.shuffle,
            ids=ids,
        )

    def batch_cost(self, lengths: np.ndarray) -> float:
        if len(lengths) == 0:
            return 0.0
        crop = round_up(self.crop_frames, self.budget.pad_multiple)
        return float(len(lengths) * item_cost(crop, self.budget.quadratic_frames))

    def batches(self, rng: np.random.Generator) -> dict[int, list[BatchKey]]:
        order = self._perm(rng, self.usable)
        room = np.maximum(self.frames[order] - self.crop_frames, 0)
        offsets = (rng.random(order.size) * (room + 1)).astype(np.int64)
        return {0: _count_batches(order, self.budget.batch_size, offsets)}

    def settings(self) -> dict[str, Any]:
        return {
            "mode": str(self.kind),
            "batch_size": self.budget.batch_size,
            "crop_frames": self.crop_frames,
            "shuffle": self.shuffle,
            "usable": int(self.usable.size),
        }


def planner_from_data(
    data: DataConfig, frames: Sequence[int] | np.ndarray, ids: Sequence[str] | None = None
) -> Planner:
    """The planner a data section asks for: crop (``crop_frames``), bucketed (``bucketing``) or fixed-count."""
    if data.crop_frames:
        return CropPlanner.from_data(data, frames, ids)
    if data.bucketing:
        return BucketedPlanner.from_data(data, frames, ids)
    return FixedCountPlanner.from_data(data, frames, ids)
