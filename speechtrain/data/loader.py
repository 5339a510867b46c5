"""The input pipeline: sampler -> worker reads + collate -> pinned Batch -> device features.

``build_train_loader`` gives an endless iterable of :class:`Batch` whose state is counted in
batches *consumed by the trainer*: batches prefetched by workers but not yet handed out are not
counted, so ``state_dict()`` taken at any step resumes at exactly the next batch, whatever
``num_workers`` is. Each epoch's batches are planned up front by the sampler (a pure function of
seed and epoch), so resuming recomputes the plan and starts at batch ``k`` without replaying.

Workers read and collate whole batches (``DataLoader(batch_size=None)`` over planned batches), so
one worker call produces one Batch and the main process does no per-item work.

Builders take the :class:`speechtrain.config.DataConfig` section and explicit values (the sampler
seed, rank and world size), never the whole Config. The Trainer depends on :class:`TrainBatches`
only; :class:`TrainLoader` is the implementation built here.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.context
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from speechtrain.config import ConfigError
from speechtrain.data.augment import PitchShift, VolumeAug
from speechtrain.data.batch import Batch
from speechtrain.data.collate import MEL_PAD, collate, crop_item
from speechtrain.data.features import LogMel
from speechtrain.data.sampler import BatchKey, BucketBatchSampler
from speechtrain.errors import DataError, UserError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig


@runtime_checkable
class TrainBatches(Protocol):
    """What the Trainer needs from a training loader (``TrainLoader`` is one; a user's loader may be another).

    An endless iterable of :class:`Batch`, whose position survives ``state_dict``/``load_state_dict``
    (the exact next batch after a resume).
    """

    notes: list[str]  # lines for the run's start-up summary (bucketing, skipped items, ...)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (0-based)."""
        ...

    @property
    def mean_batch_size(self) -> float:
        """Mean items per batch of this rank in the current epoch (for learning-rate scaling)."""
        ...

    def __iter__(self) -> Iterator[Batch]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class FieldNeeds(Protocol):
    """What a task needs from the data (``speechtrain.train.task.Needs`` is one)."""

    @property
    def mel(self) -> bool: ...

    @property
    def audio(self) -> bool: ...

    @property
    def text(self) -> bool: ...

    @property
    def speakers(self) -> bool: ...

    @property
    def labels(self) -> bool: ...

    @property
    def f0(self) -> bool: ...


class UtteranceSource(Protocol):
    """What the loaders read from: a :class:`~speechtrain.data.dataset.SpeechDataset` or a look-alike
    (``speechtrain.testing.datasets.FakeSpeechDataset``)."""

    frames: np.ndarray  # mel frames per item
    ids: list[str]
    hop_length: int
    sample_rate: int

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> dict[str, Any]: ...


def item_keys(data: DataConfig, needs: FieldNeeds) -> tuple[str, ...]:
    """Item keys the loader ships for a task's ``Needs`` (with ``features_on_device`` the mel is
    computed on the device from ``audio``, so only audio travels)."""
    keys = []
    if needs.mel and not data.features_on_device:
        keys.append("mel")
    if needs.audio or (needs.mel and data.features_on_device):
        keys.append("audio")
    if needs.text:
        keys.append("tokens")
    if needs.speakers:
        keys.append("speaker")
    if needs.labels:
        keys.append("label")
    if needs.f0:
        keys.append("f0")
    return tuple(keys)


def dataset_fields(data: DataConfig, needs: FieldNeeds) -> tuple[str, ...]:
    """The ``fields`` argument of ``SpeechDataset.from_config`` for a task (mel/audio/tokens/f0 only)."""
    return tuple(k for k in item_keys(data, needs) if k in ("mel", "audio", "tokens", "f0"))


def derived_usable(data: DataConfig) -> bool:
    """Whether derived features (:mod:`speechtrain.data.derived`, computed by ``prepare`` from the stored
    audio) describe the audio the task sees: not with ``data.noise_snr_db`` (noise is added on the device,
    so XTTS's cached DVAE codes would be those of the clean audio) nor with ``data.crop_frames`` (the task
    sees a crop, perhaps key-shifted, and the features describe the whole utterance). The task then
    computes them itself from the batch's audio."""
    return data.noise_snr_db is None and not data.crop_frames


def derived_keys(data: DataConfig, dataset: Any, needs: Any) -> tuple[str, ...]:
    """The derived features a task reads (``Needs.derived``) that ``dataset`` yields, shipped with each
    batch when :func:`derived_usable`; a task computes what is not shipped from the audio."""
    if not derived_usable(data):
        return ()
    have = getattr(dataset, "derived", ())
    return tuple(name for name in getattr(needs, "derived", ()) if name in have)


def resolve_pin_memory(value: bool | str) -> bool:
    """``auto`` -> pin when CUDA is available."""
    if value == "auto":
        return torch.cuda.is_available()
    return bool(value)


@dataclass(frozen=True)
class LoaderOptions:
    """How the DataLoader under a loader runs (the ``data.num_workers`` ... settings)."""

    num_workers: int = 0
    pin_memory: bool | str = "auto"
    prefetch_factor: int | None = None
    persistent_workers: bool = False

    @classmethod
    def from_data(cls, data: DataConfig) -> LoaderOptions:
        return cls(data.num_workers, data.pin_memory, data.prefetch_factor, data.persistent_workers)


class BatchReader(torch.utils.data.Dataset[Batch]):
    """Reads and collates one planned batch (runs inside DataLoader workers)."""

    def __init__(
        self,
        dataset: UtteranceSource,
        keys: tuple[str, ...],
        pad_multiple: int = 1,
        crop_frames: int | None = None,
        hop_length: int | None = None,
        sample_rate: int | None = None,
        pitch_shift: PitchShift | None = None,
        volume: VolumeAug | None = None,
    ) -> None:
        self.dataset, self.keys = dataset, keys
        self.pad_multiple, self.crop_frames = pad_multiple, crop_frames
        self.pitch_shift = pitch_shift  # key-shifted crops (training only)
        self.volume = volume  # crops at another volume (training only)
        self.hop_length = int(hop_length or dataset.hop_length)
        self.sample_rate = int(sample_rate or dataset.sample_rate)

    def read(self, index: int) -> dict[str, Any]:
        item = self.dataset[index]
        missing = [k for k in self.keys if k not in item]
        if missing:
            raise DataError(
                f"item {item.get('id', index)} has no {missing}: the dataset was built without them; build it with "
                "SpeechDataset.from_config(data, split, fields=speechtrain.data.loader.dataset_fields(data, needs))"
            )
        out = {k: item[k] for k in self.keys}
        out["id"] = item.get("id", str(index))
        if "tokens" in self.keys and "text" in item:
            out["text"] = item["text"]  # the transcript travels with its tokens (Batch.texts)
        return out

    def __getitem__(self, key: BatchKey) -> Batch:
        items = [self.read(i) for i in key.indices]
        if self.crop_frames and key.offsets is not None:
            crop = self.crop_frames
            if self.pitch_shift is not None:
                shift = self.pitch_shift
                items = [shift.crop(it, o, crop, f) for it, o, f in zip(items, key.offsets, shift.factors(key))]
            else:
                items = [crop_item(it, o, crop, self.hop_length) for it, o in zip(items, key.offsets)]
            if self.volume is not None:
                items = [self.volume.apply(it, w) for it, w in zip(items, self.volume.draws(key))]
        return collate(items, self.pad_multiple, self.hop_length, self.sample_rate, key.bucket, self.crop_frames)

    def __len__(self) -> int:  # pragma: no cover - DataLoader with a sampler does not need it
        return len(self.dataset)


class _KeySource(torch.utils.data.Sampler[BatchKey]):
    """The batches a DataLoader iterator reads: set by the main process before each iter()."""

    def __init__(self) -> None:
        self.keys: list[BatchKey] = []

    def __iter__(self) -> Iterator[BatchKey]:
        return iter(list(self.keys))

    def __len__(self) -> int:
        return len(self.keys)


def _identity(x: Any) -> Any:
    return x


def _worker_ignores_stop_signals(worker_id: int) -> None:  # noqa: ARG001 - DataLoader's worker_init_fn
    """A loader worker leaves SIGINT and SIGTERM to the main process. Ctrl-C, Slurm, systemd and the UI's Stop
    signal the whole process group (or cgroup): a worker that died of it (torch's own worker handler dies of a
    SIGTERM from anyone but its parent) ended the run in "DataLoader worker ... killed by signal: Terminated"
    before the trainer could save. The main process stops at the next step and ends its workers itself (with
    SIGKILL: :class:`_StopProofContext`); a worker whose main process is gone exits by torch's own watchdog."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # forked with them blocked (start_workers): a pending one is now dropped
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


#: the signals a loader worker leaves to its main process
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def start_workers(loader: Iterable[Batch]) -> Iterator[Batch]:
    """``iter(loader)``, which starts its worker processes, with SIGINT and SIGTERM blocked while they start: a
    worker forked at the moment the UI's Stop reached the process group died of it before its ``worker_init_fn``
    could ignore it (torch's worker handler ends a worker on a SIGTERM from anyone but its parent), and the run
    ended in "DataLoader worker ... exited unexpectedly" inside an evaluation. The main process gets the signal
    as soon as the mask is restored; a worker inherits the mask and drops it once it ignores the signals."""
    if not hasattr(signal, "pthread_sigmask"):
        return iter(loader)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return iter(loader)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _kill(process: Any) -> None:
    process.kill()  # the worker ignores SIGTERM (see _worker_ignores_stop_signals)


# the default start method's worker process, ended by SIGKILL where torch (and multiprocessing at exit) would send
# SIGTERM; module-level classes, so that a spawned worker can unpickle its process object
_WORKERS: dict[str, type] = {}
if os.name == "posix":

    class _ForkWorker(multiprocessing.context.ForkProcess):
        terminate = _kill

    class _SpawnWorker(multiprocessing.context.SpawnProcess):
        terminate = _kill

    class _ForkServerWorker(multiprocessing.context.ForkServerProcess):
        terminate = _kill

    _WORKERS.update(fork=_ForkWorker, spawn=_SpawnWorker, forkserver=_ForkServerWorker)


def _stop_proof_context() -> Any:
    """The default multiprocessing context, whose processes are ended with SIGKILL (None off POSIX, where the
    workers keep the default signal handling)."""
    base = multiprocessing.get_context()
    worker = _WORKERS.get(base.get_start_method())
    if worker is None:
        return None
    context = type(f"StopProof{type(base).__name__}", (type(base),), {"Process": worker})
    return context()


def worker_error(exc: BaseException) -> BaseException:
    """A :class:`~speechtrain.errors.UserError` raised inside a DataLoader worker comes back as the same type
    whose message is torch's "Caught DataError in DataLoader worker process 0. Original Traceback ...": the
    original one-line message again (any other error as it is)."""
    if not isinstance(exc, UserError):
        return exc
    text = str(exc)
    if "Original Traceback" not in text:
        return exc
    name = f"{type(exc).__module__}.{type(exc).__qualname__}: "
    last = text.rsplit(name, 1)[-1] if name in text else text.strip().splitlines()[-1]
    return type(exc)(last.strip())


def _dataloader(
    reader: BatchReader, source: _KeySource, options: LoaderOptions, notes: list[str]
) -> torch.utils.data.DataLoader[Batch]:
    kwargs: dict[str, Any] = {}
    if options.num_workers > 0:
        context = _stop_proof_context()
        if context is not None:  # Ctrl-C / SIGTERM to the process group: the trainer stops, its workers go on
            kwargs.update(worker_init_fn=_worker_ignores_stop_signals, multiprocessing_context=context)
        if options.prefetch_factor is not None:
            kwargs["prefetch_factor"] = options.prefetch_factor
        kwargs["persistent_workers"] = options.persistent_workers
    else:
        if options.prefetch_factor is not None:
            notes.append("data.prefetch_factor not used: it needs data.num_workers > 0")
        if options.persistent_workers:
            notes.append("data.persistent_workers not used: it needs data.num_workers > 0")
    pin = resolve_pin_memory(options.pin_memory)
    if options.pin_memory is True and not torch.cuda.is_available():
        notes.append("data.pin_memory not used: no CUDA device")
        pin = False
    return torch.utils.data.DataLoader(
        reader,
        batch_size=None,
        sampler=source,
        num_workers=options.num_workers,
        collate_fn=_identity,
        pin_memory=pin,
        # its own generator: creating an iterator draws a worker base seed, which must not move the
        # global torch RNG (a resumed run creates iterators at other points than the original run)
        generator=torch.Generator().manual_seed(0),
        **kwargs,
    )


class _Totals:
    def __init__(self) -> None:
        self.batches = self.items = self.real_frames = self.padded_frames = 0
        self.audio_seconds = 0.0

    def add(self, batch: Batch) -> None:
        self.batches += 1
        self.items += batch.size
        self.real_frames += batch.real_frames
        self.padded_frames += batch.padded_frames
        self.audio_seconds += batch.audio_seconds

    @property
    def padding_fraction(self) -> float:
        return 0.0 if self.padded_frames == 0 else 1.0 - self.real_frames / self.padded_frames

    def to_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "items": self.items,
            "real_frames": self.real_frames,
            "padded_frames": self.padded_frames,
            "audio_seconds": self.audio_seconds,
            "padding_fraction": self.padding_fraction,
        }

    def load(self, raw: dict[str, Any]) -> None:
        for k in ("batches", "items", "real_frames", "padded_frames"):
            setattr(self, k, int(raw.get(k, 0)))
        self.audio_seconds = float(raw.get("audio_seconds", 0.0))


class TrainLoader:
    """Endless iterable of training batches across epochs, resumable at the exact next batch."""

    def __init__(
        self,
        dataset: UtteranceSource,
        sampler: BucketBatchSampler,
        reader: BatchReader,
        options: LoaderOptions = LoaderOptions(),
    ) -> None:
        self.dataset, self.sampler, self.reader = dataset, sampler, reader
        self.notes: list[str] = list(sampler.report.lines())
        self._source = _KeySource()
        self._loader = _dataloader(reader, self._source, options, self.notes)
        self.num_workers = options.num_workers
        self.pin_memory = self._loader.pin_memory
        self._total, self._epoch_totals = _Totals(), _Totals()
        self._history: list[dict[str, Any]] = []
        self._generation = 0

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    @property
    def num_buckets(self) -> int:
        """Duration buckets of the plan (1 outside bucketing): each may bring its own batch shapes."""
        return max(1, len(self.sampler.planner.boundaries))

    def set_epoch(self, epoch: int) -> None:
        """Jump forward to the start of ``epoch`` (carrying rank remainders on the way)."""
        if epoch != self.sampler.epoch:
            self._finish_epoch()
            self.sampler.set_epoch(epoch)
            self._generation += 1

    def __len__(self) -> int:
        """Batches of this rank in the current epoch."""
        return len(self.sampler)

    @property
    def mean_batch_size(self) -> float:
        """Mean items per batch of this rank in the current epoch's plan (for lr scaling)."""
        keys = self.sampler.current_plan().for_rank(self.sampler.rank)
        return sum(len(k.indices) for k in keys) / max(1, len(keys))

    def _finish_epoch(self) -> None:
        if self._epoch_totals.batches:
            self._history.append({"epoch": self.sampler.epoch, **self._epoch_totals.to_dict()})
            self._history = self._history[-100:]
        self._epoch_totals = _Totals()

    def __iter__(self) -> Iterator[Batch]:
        generation = self._generation
        while True:
            if self.sampler.position >= len(self.sampler):
                self._finish_epoch()
                self.sampler.advance()
            self._source.keys = self.sampler.epoch_keys()
            it = start_workers(self._loader)
            try:
                while True:
                    try:
                        batch = next(it)
                    except StopIteration:
                        break
                    except UserError as exc:  # a damaged cache file, read in a worker: its message, one line
                        raise worker_error(exc) from None
                    if generation != self._generation:
                        return  # load_state_dict/set_epoch happened: this iterator is stale
                    self.sampler.position += 1  # counted when handed to the trainer
                    self._total.add(batch)
                    self._epoch_totals.add(batch)
                    yield batch
                    if generation != self._generation:
                        return
            finally:
                del it  # stops workers of a non-persistent loader, drops prefetched batches

    def stats(self) -> dict[str, Any]:
        """Padding fraction and counts so far (total and this epoch), and what was left out."""
        report = self.sampler.report
        skipped = dict(report.skipped)
        if self.sampler.dropped_items:
            skipped["rank_remainder"] = self.sampler.dropped_items
        return {
            "epoch": self.sampler.epoch,
            "position": self.sampler.position,
            "batches_per_epoch": len(self.sampler),
            **self._total.to_dict(),
            "epoch_padding_fraction": self._epoch_totals.padding_fraction,
            "epochs": list(self._history),
            "oversize": report.oversize,
            "oversize_action": report.oversize_action,
            "crop_short": report.crop_short,
            "crop_short_action": report.crop_short_action,
            "skipped": skipped,
            "carried_batches": len(self.sampler.carried),
            "dropped_batches": self.sampler.dropped,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.sampler.state_dict(),
            "total": self._total.to_dict(),
            "epoch_totals": self._epoch_totals.to_dict(),
            "history": list(self._history),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self._total.load(state.get("total", {}))
        self._epoch_totals.load(state.get("epoch_totals", {}))
        self._history = list(state.get("history", []))
        self._generation += 1
        if self.sampler.resume_note:
            self.notes.append(self.sampler.resume_note)


def build_train_loader(
    data: DataConfig,
    dataset: UtteranceSource,
    needs: FieldNeeds,
    *,
    seed: int,
    rank: int | None = None,
    world_size: int | None = None,
) -> TrainLoader:
    """The training loader for ``dataset`` (a SpeechDataset or look-alike) and a task's ``needs``.

    ``seed`` is the sampler's seed (``train.seed``); ``rank``/``world_size`` default to
    torch.distributed when initialised, else 0/1.
    """
    if len(dataset) == 0:
        raise DataError("the training set is empty: check data.manifest and the prepare report")
    if data.crop_frames and not (needs.mel or needs.audio):
        raise DataError("data.crop_frames crops mel and audio, but the task needs neither")
    sampler = BucketBatchSampler.from_config(
        data, dataset.frames, seed=seed, ids=getattr(dataset, "ids", None), rank=rank, world_size=world_size
    )
    sampler.replan_changed_data = True  # a resume after a data filter changed (data.max_duration) re-plans the epoch
    if sampler.usable.size == 0:
        raise DataError("every utterance was skipped by the sampler: " + "; ".join(sampler.report.lines()))
    keys = item_keys(data, needs) + derived_keys(data, dataset, needs)
    shift = PitchShift.from_data(data, seed)
    if shift is not None and "audio" not in keys:
        raise ConfigError(
            "data.pitch_shift_prob shifts the audio of each crop (and recomputes its mel), but this task reads no "
            "audio: set data.features_on_device=true, or data.pitch_shift_prob=0"
        )
    volume = VolumeAug.from_data(data, seed)
    if volume is not None and "audio" not in keys:
        raise ConfigError(
            "data.volume_aug_prob scales the audio of each crop with its mel, but this task reads no audio: set "
            "data.volume_aug_prob=0"
        )
    reader = BatchReader(dataset, keys, data.pad_multiple, data.crop_frames, pitch_shift=shift, volume=volume)
    reader.read(int(sampler.usable[0]))  # fail here, not in a worker, when a field is missing
    return TrainLoader(dataset, sampler, reader, LoaderOptions.from_data(data))


class EvalLoader:
    """One ordered pass over the evaluation set in batches of ``eval_batch_size`` (re-iterable)."""

    def __init__(self, reader: BatchReader, keys: list[BatchKey], options: LoaderOptions = LoaderOptions()) -> None:
        self.reader, self.keys = reader, keys
        self.notes: list[str] = []
        self._source = _KeySource()
        self._source.keys = keys
        self._loader = _dataloader(reader, self._source, options, self.notes)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Batch]:
        try:
            yield from start_workers(self._loader)
        except UserError as exc:
            raise worker_error(exc) from None


def build_eval_loader(data: DataConfig, dataset: UtteranceSource, needs: FieldNeeds) -> EvalLoader:
    """Whole utterances (no crop) in dataset order, ``data.eval_batch_size`` per batch."""
    bs = data.eval_batch_size
    keys = [BatchKey(tuple(range(s, min(s + bs, len(dataset)))), None, None) for s in range(0, len(dataset), bs)]
    reader = BatchReader(dataset, item_keys(data, needs) + derived_keys(data, dataset, needs), data.pad_multiple, None)
    if keys:
        reader.read(0)
    return EvalLoader(reader, keys, LoaderOptions.from_data(data))


class DeviceFeatures(nn.Module):
    """Features and augmentation for a Batch already on the device (no host round trip).

    - ``data.features_on_device``: ``mel`` = LogMel(``audio``) (the loader then ships raw audio only);
    - training only (``module.train()``): additive Gaussian noise at ``data.noise_snr_db`` on the
      audio (before the mel), SpecAugment time/frequency masks on the mel within each item's valid
      length (masked values set to the item's mean log-mel).
    """

    def __init__(self, data: DataConfig, needs: FieldNeeds | None = None) -> None:
        super().__init__()
        self.hop_length = data.hop_length
        self.compute_mel = bool(data.features_on_device) and (needs is None or needs.mel)
        self.logmel = LogMel.from_config(data) if self.compute_mel else None
        self.noise_snr_db = data.noise_snr_db
        self.time_masks, self.time_mask_width = data.time_masks, data.time_mask_width
        self.freq_masks, self.freq_mask_width = data.freq_masks, data.freq_mask_width

    @property
    def active(self) -> bool:
        """Whether forward changes anything (in training mode)."""
        return self.compute_mel or self.noise_snr_db is not None or self.time_masks > 0 or self.freq_masks > 0

    def forward(self, batch: Batch, training: bool | None = None) -> Batch:
        """Features (and, when training, augmentation) of a batch on the device. ``training``
        overrides the module's train/eval mode for this call."""
        train = self.training if training is None else bool(training)
        tensors = dict(batch.tensors)
        host = {k: list(v) for k, v in batch.host_lengths.items()}
        if train and self.noise_snr_db is not None:
            if "audio" not in tensors:
                raise ConfigError(
                    "data.noise_snr_db adds noise to audio, but the batch has none: set data.features_on_device=true "
                    "(noise then reaches the mel) or use a task that reads audio"
                )
            tensors["audio"] = self._add_noise(tensors["audio"], tensors["audio_lengths"])
        if self.logmel is not None:
            if "audio" not in tensors:
                raise DataError(
                    "data.features_on_device needs audio in the batch (build the loader with the same data settings)"
                )
            audio = tensors["audio"]  # (B, 1, T_samples)
            lengths = torch.div(tensors["audio_lengths"], self.hop_length, rounding_mode="floor")
            mel = self.logmel(audio)  # (B, n_mels, T_frames)
            frames = torch.arange(mel.shape[-1], device=mel.device)
            tensors["mel"] = mel.masked_fill(frames[None, None, :] >= lengths[:, None, None], MEL_PAD)
            tensors["mel_lengths"] = lengths
            host["mel_lengths"] = [n // self.hop_length for n in host.get("audio_lengths", [])]
        if train and "mel" in tensors and (self.time_masks or self.freq_masks):
            tensors["mel"] = self._spec_augment(tensors["mel"], tensors["mel_lengths"])
        ids = list(batch.ids)
        return Batch(
            tensors, ids, batch.hop_length, batch.sample_rate, batch.pad_multiple, batch.bucket, host, list(batch.texts)
        )

    def _add_noise(self, audio: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # audio: (B, 1, T_samples); per-item signal power over the valid samples only
        assert self.noise_snr_db is not None
        valid = (torch.arange(audio.shape[-1], device=audio.device)[None, :] < lengths[:, None]).unsqueeze(1)
        power = (audio.float().pow(2) * valid).sum(dim=-1, keepdim=True) / lengths.clamp(min=1)[:, None, None]
        std = torch.sqrt(power / (10.0 ** (self.noise_snr_db / 10.0)))
        noise = torch.randn_like(audio, dtype=torch.float32) * std * valid
        return (audio.float() + noise).to(audio.dtype)

    @staticmethod
    def _band_mask(lengths: torch.Tensor, size: int, count: int, width: int) -> torch.Tensor:
        """(B, size) bool: ``count`` random bands of width <= ``width`` within each item's length."""
        b = lengths.shape[0]
        dev = lengths.device
        lens = lengths.to(torch.float32)[:, None]  # (B, 1)
        widths = torch.floor(torch.rand(b, count, device=dev) * (width + 1)).clamp(max=lens)
        starts = torch.floor(torch.rand(b, count, device=dev) * (lens - widths + 1))
        pos = torch.arange(size, device=dev, dtype=torch.float32)[None, None, :]  # (1, 1, size)
        inside = (pos >= starts[..., None]) & (pos < (starts + widths)[..., None])  # (B, count, size)
        return inside.any(dim=1)

    def _spec_augment(self, mel: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, n_mels, t = mel.shape  # (B, n_mels, T_frames)
        valid = torch.arange(t, device=mel.device)[None, :] < lengths[:, None]  # (B, T_frames)
        denom = (lengths.clamp(min=1) * n_mels).to(mel.dtype)
        mean = (mel * valid[:, None, :]).sum(dim=(1, 2)) / denom  # (B,)
        mask = torch.zeros_like(mel, dtype=torch.bool)
        if self.time_masks and self.time_mask_width:
            tmask = self._band_mask(lengths, t, self.time_masks, self.time_mask_width) & valid
            mask |= tmask[:, None, :]
        if self.freq_masks and self.freq_mask_width:
            full = torch.full_like(lengths, n_mels)
            fmask = self._band_mask(full, n_mels, self.freq_masks, self.freq_mask_width)
            mask |= fmask[:, :, None] & valid[:, None, :]
        return torch.where(mask, mean[:, None, None].expand_as(mel), mel)


class TimedIterator:
    """Wraps an iterator and adds up the seconds spent blocked in ``next()`` (the data wait)."""

    def __init__(self, iterable: Iterable[Any]) -> None:
        self._it = iter(iterable)
        self.wait_seconds = 0.0
        self.last_wait = 0.0
        self.count = 0

    def __iter__(self) -> TimedIterator:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        try:
            return next(self._it)
        finally:
            self.last_wait = time.perf_counter() - start
            self.wait_seconds += self.last_wait
            self.count += 1

    def reset(self) -> float:
        """Return the wait accumulated since the last reset and start again from zero."""
        waited, self.wait_seconds = self.wait_seconds, 0.0
        return waited

    @property
    def mean_wait(self) -> float:
        return self.wait_seconds / self.count if self.count else math.nan
