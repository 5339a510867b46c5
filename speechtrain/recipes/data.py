"""Every call into :mod:`speechtrain.data` that needs the config, in one place.

The other recipes and the commands reach the data layer through :class:`DataRecipe`: it holds the
``data`` section (and the seed) and calls the data API with them, so that a change of that API
is made here and nowhere else. It also asks the model family for its derived features (XTTS's DVAE
codes, :mod:`speechtrain.data.derived`), so that ``prepare`` caches them and the datasets yield them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from speechtrain import registry
from speechtrain.config import Config
from speechtrain.data.batch import Batch
from speechtrain.data.loader import TrainBatches
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.train.task import Needs

log = get_logger(__name__)

#: the speakers and labels of a synthetic set a task is set up on: one of each, which every family accepts
NEUTRAL_SET = {"num_speakers": 1, "num_labels": 1}

#: ``read(indices, crop_at_start, bucket)``: a padded Batch of those dataset items
ReadBatch = Callable[[tuple[int, ...], bool, int], Batch]


#: the recipe whose data settings ``prepare DATA`` without ``--config`` prepares for: the README's VITS for a corpus
#: with transcripts, its vocoder for audio alone (so that the next ``plan``/``train`` with it reuses the cache)
DEFAULT_RECIPES = {True: "vits_tiny", False: "vocoder_hifigan_tiny"}


def default_recipe(manifest: str, fmt: str = "auto", encoding: str | None = None) -> str:
    """The recipe name ``prepare`` uses for ``manifest`` when given no config (see :data:`DEFAULT_RECIPES`)."""
    from speechtrain.data.manifest import read_manifest

    entries, _ = read_manifest(manifest, fmt, encoding)
    return DEFAULT_RECIPES[any(e.text for e in entries)]


class DataRecipe:
    """The data side of a run: prepare the cache, open the datasets, build loaders and readers."""

    def __init__(self, cfg: Config) -> None:
        self.data = cfg.data
        self.model = cfg.model
        self.seed = cfg.train.seed
        self._search = [cfg.source_dir, cfg.source_dir.parent] if cfg.source_dir else []

    # ------------------------------------------------------------------ the model family's derived features
    def derived(self) -> list[Any]:
        """The derived features the model family asks ``prepare`` to cache (XTTS: the DVAE codes), when the
        task would see them: none with ``data.noise_snr_db`` or ``data.crop_frames``
        (:func:`speechtrain.data.loader.derived_usable`). Asked again each time: the family's answer
        depends on files (its weights) that may appear or change during a run's set-up."""
        from speechtrain.data.loader import derived_usable

        if not derived_usable(self.data):
            return []
        return registry.derived_features(self.model, self.data, search=self._search)

    def limits(self) -> list[Any]:
        """The model family's item limits (XTTS: BPE tokens, audio codes): ``prepare`` skips the items that
        break them, in the training and the eval set alike (:mod:`speechtrain.data.limits`)."""
        return registry.item_limits(self.model, self.data, search=self._search)

    # ------------------------------------------------------------------ the feature cache
    def prepare(
        self,
        workers: int | None = None,
        strict: bool = False,
        progress: bool = True,
        require_text: bool | None = None,
        repair: bool = False,
    ) -> Any:
        """Validate and build the feature cache (``speechtrain prepare``; ``repair``: damaged feature files are
        computed again); the PrepareReport."""
        from speechtrain.data.prepare import prepare_dataset

        return prepare_dataset(
            self.data,
            workers=workers,
            strict=strict,
            progress=progress,
            require_text=require_text,
            derived=self.derived(),
            limits=self.limits(),
            repair=repair,
        )

    def ensure_prepared(self, require_text: bool | None = None) -> Any:
        """Prepare only when the cache is missing or stale; the report, or None when it was up to date."""
        from speechtrain.data.prepare import ensure_prepared

        report = ensure_prepared(self.data, require_text=require_text, derived=self.derived(), limits=self.limits())
        if report is not None:
            log.info(f"prepared the feature cache: {report.summary()}")
        return report

    # ------------------------------------------------------------------ the run's text symbols
    def learned_symbols(self) -> list[str] | None:
        """The symbols ``prepare`` learned from the training transcripts (None: no fresh cache)."""
        from speechtrain.data.store import FeatureStore

        if not self.data.manifest:
            return None
        try:
            return FeatureStore.from_data(self.data, self.derived(), self.limits()).open_split("train", None).symbols
        except UserError:
            return None

    def resolve_symbols(self, prepare: bool = True) -> list[str] | str | None:
        """Set ``data.symbols`` to the symbols learned from the corpus unless a set is pinned, so that
        the task sizes its text embedding from them and the run's config.yaml (and every checkpoint)
        records them. ``prepare``: build the cache first when missing or stale (else only a fresh
        cache is read). A corpus without transcripts leaves ``data.symbols`` unset."""
        if not self.data.manifest:
            return self.data.symbols
        if self.data.symbols is not None:
            self.check_pinned_symbols(prepare)
            return self.data.symbols
        if prepare:
            self.ensure_prepared()
        learned = self.learned_symbols()
        if learned:
            self.data.text.symbols = list(learned)
            log.info(f"text: {len(learned)} symbols learned from the training transcripts: {''.join(learned)!r}")
        return self.data.symbols

    def check_pinned_symbols(self, prepare: bool = True) -> None:
        """Refuse a pinned ``data.symbols`` that cannot encode more than a small share of what this run's text
        front end makes of the training transcripts (a tuned recipe's or another run's symbols, read with another
        ``data.phonemizer``): the run would learn mostly ``<unk>``, and the export would refuse after training."""
        from speechtrain.data.store import FeatureStore
        from speechtrain.data.text.inventory import PINNED_REFUSE_SHARE, pinned_mismatch
        from speechtrain.data.text.tokenizer import symbols_of

        if prepare:
            self.ensure_prepared()
        try:
            split = FeatureStore.from_data(self.data, self.derived(), self.limits()).open_split("train", None)
        except UserError:
            return  # no fresh cache to read (only asked for a fresh one): prepare reports the unknown symbols
        found = pinned_mismatch((item.symbols for item in split.items), symbols_of(self.data.symbols))
        if not found.refused:
            return
        d = self.data
        shown = ", ".join(f"{c!r} x{n}" for c, n in found.unknown[:8])
        raise UserError(
            f"data.symbols pins {len(symbols_of(d.symbols))} symbols, but {100 * found.unknown_share:.1f}% of what "
            f"this run's text front end (data.phonemizer={d.phonemizer}, data.language={d.language}) makes of the "
            f"training transcripts is not among them ({shown}; more than {100 * PINNED_REFUSE_SHARE:.0f}% refuses): "
            f"the symbols came from another front end. Nothing was trained. Fix: set data.symbols=null to learn "
            f"them from the transcripts, or train with the front end the symbols came from"
        )

    # ------------------------------------------------------------------ datasets
    def fields(self, needs: Needs) -> tuple[str, ...]:
        """The item fields a task reads from the cache (its derived features among them when prepared)."""
        from speechtrain.data.loader import dataset_fields

        prepared = {f.name for f in self.derived()}
        return dataset_fields(self.data, needs) + tuple(n for n in needs.derived if n in prepared)

    def dataset(self, split: str, fields: tuple[str, ...] | list[str]) -> Any:
        """The prepared SpeechDataset of ``split`` (``train`` or ``eval``) reading ``fields``."""
        from speechtrain.data.dataset import SpeechDataset

        return SpeechDataset.from_config(self.data, split, fields=fields, derived=self.derived(), limits=self.limits())

    def train_and_eval(self, needs: Needs) -> tuple[Any, Any]:
        """(training set, eval set or None), preparing the cache when needed."""
        self.ensure_prepared(require_text=needs.text)
        fields = self.fields(needs)
        train = self.dataset("train", fields)
        if len(train) == 0:
            raise UserError(
                f"no training utterances in {self.data.manifest} (after validation); see `speechtrain prepare`"
            )
        try:
            evaluation = self.dataset("eval", fields)
        except UserError:
            evaluation = None
        return train, evaluation if evaluation is not None and len(evaluation) else None

    def synthetic(self, utterances: int, needs: Needs) -> Any:
        """``utterances`` LJSpeech-like synthetic utterances in memory (``--fake-data``)."""
        from speechtrain.data.synthetic import FakeSpeechDataset, ljspeech_like_frames
        from speechtrain.data.text import Tokenizer

        d = self.data
        frames = ljspeech_like_frames(utterances, seed=self.seed, sample_rate=d.sample_rate, hop_length=d.hop_length)
        return FakeSpeechDataset(
            frames,
            n_mels=d.n_mels,
            hop_length=d.hop_length,
            sample_rate=d.sample_rate,
            seed=self.seed,
            fields=self.fields(needs),
            tokenizer=Tokenizer.from_data(d),  # the run's symbols, as the task's (a learned set or a pinned one)
            **NEUTRAL_SET,
        )

    def setup_set(self) -> Any:
        """A small synthetic set to run ``Task.setup`` on when there is no corpus (estimate): one speaker and one
        label, which every model's set-up accepts (a single-speaker VITS refuses a set of two speakers)."""
        from speechtrain.data.synthetic import FakeSpeechDataset
        from speechtrain.data.text import Tokenizer

        d = self.data
        return FakeSpeechDataset(
            [128] * 128,
            n_mels=d.n_mels,
            hop_length=d.hop_length,
            sample_rate=d.sample_rate,
            fields=("mel", "tokens"),
            tokenizer=Tokenizer.from_data(d),  # the run's symbols, as the task's (a learned set or a pinned one)
            **NEUTRAL_SET,
        )

    def longest_train_frames(self) -> int | None:
        """The longest utterance of the prepared training set (None when it is not prepared)."""
        try:
            ds = self.dataset("train", ("mel",))
        except Exception:  # noqa: BLE001 - not prepared (or no manifest): the caller falls back to max_duration
            return None
        frames = np.asarray(ds.frames)
        return int(frames.max()) if frames.size else None

    def eval_items(self, n: int, with_f0: bool = False) -> list[tuple[Any, Any]]:
        """Up to ``n`` (mel (n_mels, T_frames), f0 (T_frames,) or None) of the eval set (else the training set):
        what a vocoder's real-time factor is measured on (``with_f0``: an NSF vocoder's, from the cache)."""
        self.ensure_prepared()
        fields = ("mel", "f0") if with_f0 else ("mel",)
        for split in ("eval", "train"):
            try:
                ds = self.dataset(split, fields)
            except UserError:
                continue
            if len(ds):
                items = [ds[i] for i in range(min(n, len(ds)))]
                return [(item["mel"], item["f0"] if with_f0 else None) for item in items]
        raise UserError(
            f"no utterances to vocode in {self.data.manifest}; check data.manifest in the run's config.yaml"
        )

    # ------------------------------------------------------------------ loaders and readers
    def train_loader(self, dataset: Any, needs: Needs) -> TrainBatches:
        from speechtrain.data.loader import build_train_loader

        return build_train_loader(self.data, dataset, needs, seed=self.seed)

    def eval_loader(self, dataset: Any, needs: Needs) -> Any:
        from speechtrain.data.loader import build_eval_loader

        return build_eval_loader(self.data, dataset, needs)

    def device_features(self, needs: Needs) -> Any:
        """The on-device features/augmentation module, or None when it would do nothing."""
        from speechtrain.data.loader import DeviceFeatures

        features = DeviceFeatures(self.data, needs)
        return features if features.active else None

    def batch_reader(self, dataset: Any, needs: Needs) -> ReadBatch:
        """Reads chosen items of ``dataset`` as one padded Batch (the tuner's batches)."""
        from speechtrain.data.loader import BatchReader, derived_keys, item_keys
        from speechtrain.data.sampler import BatchKey

        d = self.data
        keys = item_keys(d, needs) + derived_keys(d, dataset, needs)
        reader = BatchReader(dataset, keys, d.pad_multiple, d.crop_frames)

        def read(indices: tuple[int, ...], crop_at_start: bool, bucket: int) -> Batch:
            offsets = (0,) * len(indices) if crop_at_start else None
            return reader[BatchKey(indices, offsets, bucket)]

        return read

    def bucket_bounds(self, frames: np.ndarray) -> list[int]:
        """Bucket upper bounds in frames, shortest first, as training will plan them: the configured
        ones, else equal-duration quantiles (their count chosen from the corpus with num_buckets=auto)."""
        from speechtrain.data.planners import BucketedPlanner

        return [int(x) for x in BucketedPlanner.from_data(self.data, frames).boundaries]

    # ------------------------------------------------------------------ plans
    def plan(self, frames: Any, **kwargs: Any) -> dict[str, Any]:
        """The batch plan report of one epoch over ``frames`` (``speechtrain plan``)."""
        from speechtrain.data.plan import plan_report

        kwargs.setdefault("seed", self.seed)
        return plan_report(frames, self.data, **kwargs)

    def format_plan(self, report: dict[str, Any]) -> str:
        from speechtrain.data.plan import format_plan

        return format_plan(report)
