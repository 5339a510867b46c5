"""The batch sampler: a planner's batches dealt out to ranks, resumable at the exact next batch.

:class:`BucketBatchSampler` takes a :class:`~speechtrain.data.planners.Planner` (bucketed,
fixed-count or crop; :func:`~speechtrain.data.planners.planner_from_data` picks the one a data
section asks for). An epoch's plan is a pure function of ``seed``, ``epoch`` and the batches carried
over from the previous epoch, so resuming recomputes the plan and starts at batch ``k``:

1. The planner cuts the epoch's batches, by bucket, from a generator seeded by ``(seed, epoch)``.
2. Batches are grouped ``world_size`` at a time from the same bucket (so that ranks run batches of
   similar length at the same step), groups are shuffled, and rank ``r`` takes the ``r``-th batch of
   every group: every rank gets the same number of batches. The last incomplete group (at most
   ``world_size - 1`` batches) is carried into the next epoch (``rank_remainder="defer"``) or dropped
   and counted (``"drop_report"``).

``state_dict()`` holds the epoch, the position in it and the carried batches: nothing else is
needed to resume exactly. State dicts of earlier versions load as they are.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from speechtrain.config import ConfigError
from speechtrain.data.planners import (
    OVERSIZE,
    BatchKey,
    BucketedPlanner,
    CropPlanner,
    FixedCountPlanner,
    FrameBudget,
    PlanKind,
    Planner,
    SamplerReport,
    equal_duration_boundaries,
    item_cost,
    planner_from_data,
)
from speechtrain.errors import DataError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

__all__ = [
    "OVERSIZE",
    "BatchKey",
    "BucketBatchSampler",
    "BucketedPlanner",
    "CropPlanner",
    "EpochPlan",
    "FixedCountPlanner",
    "FrameBudget",
    "Planner",
    "RankRemainder",
    "SamplerReport",
    "equal_duration_boundaries",
    "item_cost",
    "resolve_rank",
]


class RankRemainder(StrEnum):
    """Batches that do not divide among ranks at the end of an epoch."""

    DEFER = "defer"  # carried into the next epoch
    DROP_REPORT = "drop_report"  # dropped and counted


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


class BucketBatchSampler:
    """A planner's batches for this rank, reproducible from ``seed`` and epoch (see the module doc).

    Iterating yields lists of indices for this rank, from the current position to the end of the
    epoch (usable as a ``torch.utils.data.DataLoader`` ``batch_sampler``); :meth:`epoch_keys`
    gives the same batches as :class:`BatchKey` (with crop offsets).
    """

    def __init__(
        self,
        planner: Planner,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        rank_remainder: RankRemainder | str = RankRemainder.DEFER,
    ) -> None:
        self.planner = planner
        self.seed = int(seed)
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.rank_remainder = RankRemainder(rank_remainder)
        # resumable state
        self.epoch = 0
        self.position = 0
        self.carried: list[BatchKey] = []
        self.dropped = 0  # batches (and items) dropped by rank_remainder="drop_report"
        self.dropped_items = 0
        self._plan: EpochPlan | None = None
        self.resume_note: str | None = None
        #: a state saved for another number of utterances (a changed data filter, e.g. data.max_duration):
        #: re-plan the epoch and go on (True; the training loader's choice) or refuse (False)
        self.replan_changed_data = False

    @classmethod
    def from_config(
        cls,
        data: DataConfig,
        frames: Sequence[int] | np.ndarray,
        *,
        seed: int = 0,
        ids: Sequence[str] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> BucketBatchSampler:
        """The sampler a :class:`speechtrain.config.DataConfig` asks for (``seed`` is ``train.seed``)."""
        planner = planner_from_data(data, frames, ids)
        return cls(planner, seed=seed, rank=rank, world_size=world_size, rank_remainder=data.rank_remainder)

    # ------------------------------------------------------------------ what the planner decided
    @property
    def frames(self) -> np.ndarray:
        """Mel frames per utterance."""
        return self.planner.frames

    @property
    def usable(self) -> np.ndarray:
        """Indices of the utterances that are batched (the others were skipped and reported)."""
        return self.planner.usable

    @property
    def report(self) -> SamplerReport:
        return self.planner.report

    @property
    def budget(self) -> float:
        """The largest batch cost the plan allows (inf for fixed-count batches)."""
        return self.planner.limit

    @property
    def frame_budget(self) -> FrameBudget:
        return self.planner.budget

    @property
    def kind(self) -> PlanKind:
        return self.planner.kind

    @property
    def boundaries(self) -> np.ndarray:
        """Bucket upper bounds in frames (empty outside bucketing)."""
        return self.planner.boundaries

    # ------------------------------------------------------------------ planning (pure)
    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.seed % 2**32, int(epoch)]))

    def plan(self, epoch: int, carried: Sequence[BatchKey] = ()) -> EpochPlan:
        """The whole epoch for every rank: a pure function of seed, epoch and ``carried``."""
        w = self.world_size
        rng = self._rng(epoch)
        by_bucket = self.planner.batches(rng)
        groups: list[list[BatchKey]] = []
        leftovers: list[BatchKey] = list(carried)
        for b in sorted(by_bucket):
            batches = by_bucket[b]
            full = len(batches) // w * w
            groups.extend(batches[i : i + w] for i in range(0, full, w))
            leftovers.extend(batches[full:])
        shuffle = self.planner.shuffle
        if shuffle and len(leftovers) > 1:
            leftovers = [leftovers[i] for i in rng.permutation(len(leftovers))]
        full = len(leftovers) // w * w
        groups.extend(leftovers[i : i + w] for i in range(0, full, w))
        remainder = leftovers[full:]
        if shuffle:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        return EpochPlan(epoch, w, groups, remainder, carried_in=len(carried))

    # ------------------------------------------------------------------ iteration and state
    def current_plan(self) -> EpochPlan:
        """The plan of the current epoch (cached)."""
        if self._plan is None or self._plan.epoch != self.epoch:
            self._plan = self.plan(self.epoch, self.carried)
            if self._plan.batches_per_rank == 0 and self.rank_remainder == RankRemainder.DROP_REPORT:
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
        if self.rank_remainder == RankRemainder.DEFER:
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
        return self.planner.settings()

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
            "mode": str(self.kind),
            "num_items": int(self.frames.size),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved_items = int(state.get("num_items", self.frames.size))
        if saved_items != self.frames.size and not self.replan_changed_data:
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
        if old is not None:
            # only what shapes this planner's plan counts (earlier versions saved every setting)
            changed = sorted(k for k, v in self.settings().items() if old.get(k) != v)
            if saved_items != self.frames.size:
                changed.append(f"the data: {saved_items} -> {self.frames.size} utterances")
            if changed:
                self._resume_with_new_settings(changed, old, state)
        elif saved_items != self.frames.size:
            self._resume_with_new_settings([f"the data: {saved_items} -> {self.frames.size} utterances"], {}, state)

    def _resume_with_new_settings(self, changed: list[str], old: dict[str, Any], state: dict[str, Any]) -> None:
        """Batching changed since the checkpoint (e.g. after `speechtrain tune`): re-plan the epoch
        and resume at the same fraction of it; said in ``resume_note`` and a warning."""
        if (old.get("mode") != str(self.kind) or int(state.get("num_items", -1)) != self.frames.size) and self.carried:
            self.dropped += len(self.carried)
            self.dropped_items += sum(len(k.indices) for k in self.carried)
            self.carried = []
        old_len = max(1, int(state.get("epoch_batches", 1)))
        new_len = len(self)
        new_pos = min(new_len, round(self.position * new_len / old_len))
        self.resume_note = (
            f"batching settings or data changed since the checkpoint ({', '.join(changed)}): epoch {self.epoch} was "
            f"re-planned and resumes at batch {new_pos} of {new_len} (was {self.position} of {old_len}); "
            "the rest of this epoch is not exactly the interrupted run's"
        )
        self.position = new_pos
        warnings.warn(self.resume_note, stacklevel=3)
