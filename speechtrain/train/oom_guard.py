"""The OOM guard: a training step that runs out of memory is redone in smaller pieces, not lost.

When a micro-batch of duration bucket ``k`` raises an out-of-memory error (see
:func:`speechtrain.memory.oom.is_oom_error`), the guard halves the number of items a micro-batch of
that bucket may hold (``caps[k]``), drops every reference to the failed attempt, and the whole stage
is run again with the bucket's micro-batches split into pieces of at most that many items. Each
piece's loss is weighted by its share of the step, so the gradient is the one of the whole batch.
The cap stays for the rest of the run (and in checkpoints): a bucket fails at most ``log2(items)``
times. One utterance that does not fit alone is skipped for the rest of the run (its id kept in
checkpoints, reported in the log and as an ``oom_skipped`` event, the caps learned on the way to it
undone), or, with ``on_single="stop"`` (``train.oom_single_utterance``), a
:class:`~speechtrain.errors.UserError` with the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from speechtrain.data.batch import Batch
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.memory.oom import is_oom_error

log = get_logger(__name__)

#: ``run_piece(i, piece, split, agree)``: forward + backward of a piece of micro-batch ``i`` (``split``: a part of
#: it); ``agree`` is given for the last piece of the stage only: under a process group ``run_piece`` calls it
#: after the forward and before the (gradient-syncing) backward
RunPiece = Callable[[int, Batch, bool, Callable[[], None] | None], None]


class _PeerFailed(Exception):
    """Another rank ran out of memory in this stage: every rank redoes it."""


@dataclass(frozen=True)
class StageVote:
    """What a rank says at the one agreement of a stage attempt; agreed, each flag is "on any rank"."""

    failed: bool = False  # ran out of memory in this attempt (every rank then redoes it)
    empty: bool = False  # had nothing to train (every utterance of its micro-batches left out)
    trained: bool = False  # ran every piece of its plan


@dataclass(frozen=True)
class StageRun:
    """How a stage went: ``here`` this rank trained something; ``anywhere``/``empty_somewhere`` agreed by every
    rank (a rank with nothing to train still joins the gradient sync when another rank trained)."""

    here: bool
    anywhere: bool
    empty_somewhere: bool


class OOMGuard:
    """Per-bucket item caps learned from out-of-memory errors, and the retry of a stage."""

    def __init__(self, enabled: bool = True, on_single: str = "skip") -> None:
        self.enabled, self.on_single = enabled, on_single
        self.caps: dict[int, int] = {}  # bucket (-1: none) -> max items per micro-batch
        self.skipped: dict[str, int] = {}  # utterance id -> padded frames: too long to fit alone, left out
        self.recoveries = 0
        self.events: list[dict[str, Any]] = []  # taken by the next metrics row

    def without_skipped(self, mb: Batch) -> Batch | None:
        """``mb`` without the utterances left out (None when none is left)."""
        if not any(i in self.skipped for i in mb.ids):
            return mb
        keep = [k for k, i in enumerate(mb.ids) if i not in self.skipped]
        return mb.select(keep) if keep else None

    def pieces(self, mb: Batch) -> list[Batch]:
        """``mb`` without its skipped utterances, split by its bucket's cap (itself when neither applies)."""
        left = self.without_skipped(mb)
        if left is None:
            return []
        mb = left
        cap = self.caps.get(_bucket(mb))
        return mb.chunks(cap) if cap else [mb]

    def run_stage(
        self,
        micro: Sequence[Batch],
        run_piece: RunPiece,
        reset: Callable[[], None],
        *,
        stage: str,
        step: int,
        vote: Callable[[StageVote], StageVote] = lambda mine: mine,
    ) -> StageRun:
        """Run every piece of ``micro``; on an OOM (any rank's, through ``vote``) learn the smaller cap (or the
        utterance to leave out), call ``reset`` (drop the attempt's gradients and tensors) and run the stage again.

        Under a process group the ranks agree once per attempt (``vote``: one all-reduce): in the last piece,
        between its forward and the backward that syncs gradients (``run_piece`` calls ``agree``), or, on a
        rank that ran out of memory before getting there or has nothing to train, where it stops. An
        out-of-memory error in the syncing backward itself cannot be redone together (the other ranks are
        already in the all-reduce): that is a :class:`~speechtrain.errors.UserError`. With one process
        ``agree`` is never called and any OOM is redone.
        """
        caps_before = dict(self.caps)
        while True:
            failed: Batch | None = None
            message = ""
            agreed: StageVote | None = None
            peer_failed = False
            plan: list[tuple[int, Batch, bool]] = []

            def agree() -> None:
                nonlocal agreed
                agreed = vote(StageVote(trained=True))
                if agreed.failed:
                    raise _PeerFailed

            try:
                plan = [
                    (i, piece, len(pieces) > 1 or piece.size != mb.size)
                    for i, mb in enumerate(micro)
                    for pieces in [self.pieces(mb)]
                    for piece in pieces
                ]
                for n, (i, piece, split) in enumerate(plan):
                    failed = piece
                    run_piece(i, piece, split, agree if n == len(plan) - 1 else None)
                failed = None
            except _PeerFailed:
                failed, peer_failed = None, True
            except Exception as exc:
                if not (self.enabled and is_oom_error(exc)):
                    raise
                if agreed is not None:
                    raise UserError(
                        f"out of memory in the backward of the last micro-batch of stage '{stage}' (step {step}), "
                        "while the other ranks were already syncing gradients: a multi-process step cannot be "
                        "redone there. Lower data.max_frames / data.batch_size for this bucket (speechtrain tune), "
                        f"or switch on accel.activation_checkpointing. ({str(exc).splitlines()[0]})"
                    ) from None
                message = str(exc).splitlines()[0]
                del exc  # the traceback holds the failed attempt's tensors
            if agreed is not None and not peer_failed:
                return StageRun(here=True, anywhere=True, empty_somewhere=agreed.empty)
            if agreed is None:  # ran out of memory before the agreement, or nothing to train here
                here = bool(plan) and failed is None
                agreed = vote(StageVote(failed=failed is not None, empty=not plan, trained=here))
                if not agreed.failed:
                    return StageRun(here=here, anywhere=agreed.trained, empty_somewhere=agreed.empty)
            if failed is not None:  # learned first: ``reset`` weighs what is left for the next attempt
                self._learn(failed, stage, step, message, caps_before)
            reset()

    def _learn(self, failed: Batch, stage: str, step: int, message: str, caps_before: dict[int, int]) -> None:
        if failed.size <= 1:
            self._skip(failed, stage, step, message, caps_before)
            return
        bucket = _bucket(failed)
        new_cap = max(1, failed.size // 2)
        self.caps[bucket] = min(self.caps.get(bucket, new_cap), new_cap)
        self.recoveries += 1
        self.events.append(
            {
                "event": "oom_recovered",
                "step": step,
                "stage": stage,
                "bucket": bucket,
                "failed_items": failed.size,
                "new_max_items": self.caps[bucket],
                "padded_frames": failed.padded_frames,
            }
        )
        log.info(
            f"[oom] step {step} stage {stage}: {failed.size} items x {failed.padded_frames // failed.size} frames "
            f"did not fit; bucket {bucket} now at most {self.caps[bucket]} items per micro-batch, redoing the "
            "step in pieces",
            extra={"all_ranks": True},  # every rank's recoveries are heard (marked with the rank)
        )

    def _skip(self, failed: Batch, stage: str, step: int, message: str, caps_before: dict[int, int]) -> None:
        """One utterance does not fit alone: leave it out for the rest of the run (or stop, if asked)."""
        uid, frames = failed.ids[0], failed.padded_frames
        fix = (
            "set data.max_frames below its length with data.oversize=skip (or lower data.max_duration; a resume "
            "re-plans the epoch), data.crop_frames, accel.activation_checkpointing / bf16, or use a larger GPU"
        )
        if self.on_single == "stop":
            raise UserError(
                f"out of memory on a single utterance ({uid}, {frames} frames) in stage '{stage}': {fix}. "
                f"(train.oom_single_utterance=skip leaves such utterances out instead) ({message})"
            )
        self.skipped[uid] = frames
        self.caps = dict(caps_before)  # the halvings that led to it were caused by it: undone
        self.events.append({"event": "oom_skipped", "step": step, "stage": stage, "id": uid, "frames": frames})
        log.warning(
            f"warning: [oom] step {step} stage {stage}: utterance {uid} ({frames} frames) runs out of memory on "
            f"its own; it is left out for the rest of the run ({len(self.skipped)} so far). To keep it: {fix}",
            extra={"all_ranks": True},
        )

    def take_events(self) -> list[dict[str, Any]]:
        """The recoveries since the last call (for the metrics row)."""
        events, self.events = self.events, []
        return events

    def state_dict(self) -> dict[str, Any]:
        """The caps, counters, skipped utterances and the events not yet in a metrics row (a resume writes
        them in its first row)."""
        return {
            "bucket_caps": {str(k): v for k, v in self.caps.items()},
            "oom_recoveries": self.recoveries,
            "oom_skipped": dict(self.skipped),
            "oom_events": [dict(e) for e in self.events],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.caps = {int(k): int(v) for k, v in state["bucket_caps"].items()}
        self.recoveries = int(state["oom_recoveries"])
        self.skipped = {str(k): int(v) for k, v in (state.get("oom_skipped") or {}).items()}
        self.events = [dict(e) for e in state.get("oom_events") or []]


def merge_rank_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The OOM state of several ranks (their :meth:`OOMGuard.state_dict`) as one: per bucket the smallest cap
    any rank learned, the recoveries summed, the skipped utterances of every rank, every rank's pending events
    (marked with their rank). What a resume on another number of ranks starts from, and what a metrics row
    reports."""
    caps: dict[str, int] = {}
    skipped: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for rank, state in enumerate(states):
        for bucket, cap in state["bucket_caps"].items():
            caps[str(bucket)] = min(int(cap), caps.get(str(bucket), int(cap)))
        skipped.update({str(k): int(v) for k, v in (state.get("oom_skipped") or {}).items()})
        events += [
            {**e, "rank": e.get("rank", rank)} if len(states) > 1 else dict(e) for e in state.get("oom_events") or []
        ]
    return {
        "bucket_caps": caps,
        "oom_recoveries": sum(int(s["oom_recoveries"]) for s in states),
        "oom_skipped": skipped,
        "oom_events": events,
    }


def _bucket(mb: Batch) -> int:
    return mb.bucket if mb.bucket is not None else -1
