"""Shared pieces of the checkpoint importers (published checkpoints -> our modules' state dicts).

An importer is a pure function from a checkpoint in a reference layout (a file path or the dict it holds)
to an :class:`ImportedCheckpoint`: one state dict per task module in our names, and an
:class:`ImportReport` that accounts for every tensor of the source (mapped to which key, or skipped and
why) and every tensor of ours that had to be made up (and why). ``ImportedCheckpoint.load_into(task)``
then checks the result against the task's modules, key by key and shape by shape, so a checkpoint of
another size or family fails with a message that says what differs.

Weight-norm and spectral-norm names: references saved with ``torch.nn.utils.weight_norm`` /
``spectral_norm`` store ``weight_g``/``weight_v`` and ``weight_orig``/``weight_u``/``weight_v``; ours use
the parametrization API (``parametrizations.weight.original0/1``; ``parametrizations.weight.original`` and
``parametrizations.weight.0._u/_v``). :func:`modern_norm_names` translates; newer files that already use
the parametrization names pass unchanged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from speechtrain import ckptio
from speechtrain.errors import CheckpointError

StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class TensorMapping:
    """One source tensor and where it went."""

    source: str
    target: str
    shape: tuple[int, ...]
    note: str = ""


@dataclass
class ImportReport:
    """Every source tensor mapped or skipped (with the reason), and every target tensor made up."""

    layout: str
    source: str
    mapped: list[TensorMapping] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (source key, why)
    filled: list[tuple[str, str]] = field(default_factory=list)  # (target key, why)

    @property
    def parameters(self) -> int:
        """Values carried over (elements of the mapped tensors)."""
        n = 0
        for m in self.mapped:
            size = 1
            for d in m.shape:
                size *= d
            n += size
        return n

    def summary(self) -> str:
        return (
            f"{self.layout} ({self.source}): {len(self.mapped)} tensors mapped ({self.parameters:,} values), "
            f"{len(self.skipped)} skipped, {len(self.filled)} made up"
        )

    def lines(self) -> list[str]:
        """The full report, one line per tensor."""
        out = [self.summary()]
        out += [f"  {m.source} -> {m.target} {list(m.shape)}" + (f" ({m.note})" if m.note else "") for m in self.mapped]
        out += [f"  {key}: skipped ({why})" for key, why in self.skipped]
        out += [f"  {key}: made up ({why})" for key, why in self.filled]
        return out


@dataclass
class ImportedCheckpoint:
    """State dicts by task module name, in our layout, and the report of how they were made."""

    state_dicts: dict[str, StateDict]
    report: ImportReport
    # module -> key -> why a shape may differ from ours (e.g. another symbol table): such a tensor keeps our
    # initialisation, recorded in the report as made up, instead of failing the load
    may_differ: dict[str, dict[str, str]] = field(default_factory=dict)
    # module -> the config that builds it as the checkpoint has it, as far as its shapes tell (for error messages)
    hints: dict[str, str] = field(default_factory=dict)

    def load_into(self, modules: Mapping[str, nn.Module] | Any, strict: bool = True) -> list[str]:
        """Load into ``modules`` (a dict of modules or a Task); returns the module names loaded.

        Each imported state dict must match its module key for key and shape for shape; with ``strict``
        every module of the task must be covered (``strict=False`` leaves modules the checkpoint lacks,
        e.g. discriminators when only a generator was published, as they are).
        """
        mods: Mapping[str, nn.Module] = modules if isinstance(modules, Mapping) else modules.modules()
        unknown = [n for n in self.state_dicts if n not in mods]
        if unknown:  # before the missing ones: a checkpoint of other discriminators lacks ours too
            hints = [f"{n}: {self.hints[n]}" for n in unknown if n in self.hints]
            fix = f"; the checkpoint's config: {'; '.join(hints)}" if hints else " (e.g. model.scale_discriminator)"
            raise CheckpointError(
                f"{self.report.source}: the task has no module(s) {unknown} (it has {sorted(mods)}): build it with the "
                f"checkpoint's discriminators{fix}"
            )
        missing_modules = [n for n in mods if n not in self.state_dicts]
        if strict and missing_modules:
            raise CheckpointError(
                f"{self.report.source}: the checkpoint has no weights for module(s) {missing_modules} of the task "
                f"(it has {sorted(self.state_dicts)}); give the missing file, or load with strict=False to keep "
                f"their fresh initialisation"
            )
        for name, allowed in self.may_differ.items():
            if name not in mods or name not in self.state_dicts:
                continue
            sd, want = self.state_dicts[name], mods[name].state_dict()
            for key, why in allowed.items():
                if key in sd and key in want and tuple(sd[key].shape) != tuple(want[key].shape):
                    self.report.filled.append(
                        (f"{name}.{key}", f"{why}: checkpoint {list(sd[key].shape)} vs ours {list(want[key].shape)}")
                    )
                    sd[key] = want[key].detach().clone()
        for name, sd in self.state_dicts.items():
            check_state_dict(mods[name], sd, f"{self.report.source} [{name}]", self.hints.get(name))
        for name, sd in self.state_dicts.items():
            mods[name].load_state_dict(sd)
        return list(self.state_dicts)


def check_state_dict(module: nn.Module, sd: Mapping[str, torch.Tensor], what: str, hint: str | None = None) -> None:
    """Raise a :class:`CheckpointError` naming the keys and shapes where ``sd`` and ``module`` differ (``hint``:
    the config the checkpoint's shapes call for)."""
    want = module.state_dict()
    missing = [k for k in want if k not in sd]
    unexpected = [k for k in sd if k not in want]
    shapes = [
        f"{k}: checkpoint {list(sd[k].shape)} vs model {list(want[k].shape)}"
        for k in want
        if k in sd and tuple(sd[k].shape) != tuple(want[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if shapes:
            parts.append(f"{len(shapes)} shape(s) differ, e.g. {'; '.join(shapes[:3])}")
        if missing:
            parts.append(f"{len(missing)} tensor(s) of the model are missing, e.g. {missing[:3]}")
        if unexpected:
            parts.append(f"{len(unexpected)} tensor(s) the model does not have, e.g. {unexpected[:3]}")
        fix = f": {hint}" if hint else " (channels, upsampling, kernels, periods, vocabulary)"
        raise CheckpointError(
            f"{what}: the imported weights do not fit the model: {'; '.join(parts)}. Build the task with the "
            f"checkpoint's own hyperparameters{fix}"
        )


def read_checkpoint(source: str | os.PathLike[str] | Mapping[str, Any], trust_pickle: bool = False) -> tuple[Any, str]:
    """``(object, name)`` of a checkpoint given as a path or an already loaded dict.

    Files are read by :func:`speechtrain.ckptio.load` (tensors and plain containers only); files holding
    pickled Python objects (configs, trainer state: Coqui and Lightning checkpoints often do) are refused
    unless ``trust_pickle=True``.
    """
    if isinstance(source, Mapping):
        return source, "state dict"
    path = Path(source)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        return ckptio.load(path, trust_pickle=trust_pickle), str(path)
    except ckptio.PickledObjects as exc:
        raise CheckpointError(
            f"{path}: holds pickled Python objects besides tensors ({exc.detail}); loading it could run code. If "
            f"you trust the file, allow it with train.init_trust_pickle=true (Python: trust_pickle=True)"
        ) from None
    except ckptio.Unreadable as exc:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({exc.detail})") from None


def tensors_only(obj: Any, what: str, source: str) -> StateDict:
    """``obj`` as a ``{name: tensor}`` dict, or a :class:`CheckpointError` saying what was found instead."""
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        found = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
        raise CheckpointError(f"{source}: expected {what} (a dict of tensors), found {found}")
    return dict(obj)


_WN = re.compile(r"^(.*)\.weight_(g|v)$")
_SN = re.compile(r"^(.*)\.weight_(orig|u|v)$")


def modern_norm_names(sd: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Source key -> key with parametrization names, for legacy weight-norm and spectral-norm tensors
    (others map to themselves). A layer with ``weight_orig`` is spectral-normed, one with ``weight_g``
    weight-normed (``weight_v`` is read accordingly)."""
    spectral = {m.group(1) for k in sd if (m := _SN.match(k)) and m.group(2) == "orig"}
    out = {}
    for key in sd:
        sn, wn = _SN.match(key), _WN.match(key)
        if sn and sn.group(1) in spectral:
            prefix, part = sn.group(1), sn.group(2)
            out[key] = f"{prefix}.parametrizations.weight." + {"orig": "original", "u": "0._u", "v": "0._v"}[part]
        elif wn:
            out[key] = f"{wn.group(1)}.parametrizations.weight.original{'0' if wn.group(2) == 'g' else '1'}"
        else:
            out[key] = key
    return out


def map_state_dict(
    sd: Mapping[str, torch.Tensor],
    rename: Callable[[str], str | None],
    report: ImportReport,
    source_prefix: str = "",
    target_prefix: str = "",
) -> StateDict:
    """Apply :func:`modern_norm_names` then ``rename`` (None: skip, recorded) to every tensor of ``sd``,
    recording each in ``report``; returns the renamed dict."""
    out: StateDict = {}
    modern = modern_norm_names(sd)
    for key, tensor in sd.items():
        new = rename(modern[key])
        if new is None:
            report.skipped.append((source_prefix + key, "not part of our model"))
            continue
        if new in out:
            raise CheckpointError(f"{report.source}: two tensors map to {target_prefix + new} (second: {key})")
        out[new] = tensor
        note = "norm renamed" if modern[key] != key else ""
        report.mapped.append(TensorMapping(source_prefix + key, target_prefix + new, tuple(tensor.shape), note))
    return out


def weight_norm_from_plain(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(g, v)`` of weight norm over dim 0 that reproduce a plain ``weight`` exactly (g = ||w|| per output)."""
    dims = tuple(range(1, weight.dim()))
    return weight.norm(dim=dims, keepdim=True), weight.clone()


# --- train.init_from: weights only, from our own runs or a published checkpoint ----------------------------------
@dataclass(frozen=True)
class CheckpointImporter:
    """One published checkpoint layout a family reads for ``train.init_from``; each family lists its own in
    ``<family>/importers.py`` as ``IMPORTERS`` (the registry collects them, so this module imports no family).

    ``claims(obj)``: whether a loaded file is in this layout (the layouts of all families exclude each other);
    ``load(obj, second, trust_pickle)``: the imported weights (``second``: the path of a paired file, e.g. the
    discriminators of a ``g_`` file, or None); ``pair``: what that second file is (None: one file only)."""

    layout: str
    claims: Callable[[Any], bool]
    load: Callable[[Any, str | None, bool], ImportedCheckpoint]
    pair: str | None = None


def _own_checkpoint(path: Path) -> Path:
    """A run directory's checkpoint (the rule of :meth:`~speechtrain.train.rundir.RunDir.weights_candidates`:
    ``best.pt``, else the newest step checkpoint), or the file itself."""
    if path.is_dir():
        from speechtrain.train.rundir import RunDir

        candidates = RunDir(path).weights_candidates("best")
        if not candidates:
            raise CheckpointError(f"{path}: a folder without best.pt or checkpoints/step_*.pt: give a checkpoint file")
        return candidates[0]
    return path


def import_for_init(
    paths: list[str], trust_pickle: bool = False, importers: list[CheckpointImporter] | None = None
) -> ImportedCheckpoint:
    """The weights named by ``train.init_from``: a speechtrain run directory or checkpoint (every module), or a
    published checkpoint in a layout one of the families reads (``importers``; default: every registered
    family's, :func:`speechtrain.registry.checkpoint_importers`), e.g. a jik876/hifi-gan ``g_`` file (and its
    ``do_`` file), a SingingVocoders NSF-HiFiGAN file, a jaywalnut310/vits ``G_`` file (and its ``D_`` file) or a
    Coqui TTS VITS ``model.pth``. The layout is read from the file."""
    if not paths or len(paths) > 2:
        raise CheckpointError(f"train.init_from takes one checkpoint (or a g_ and a do_ file), got {paths}")
    first = _own_checkpoint(Path(paths[0]))
    obj, name = read_checkpoint(first, trust_pickle)
    if isinstance(obj, dict) and "shards" in obj and "modules" not in obj:  # an FSDP run's step file: + its shards
        from speechtrain.train import checkpoint as ckpt

        obj = {**obj, "modules": ckpt.module_states(obj, first)}
    if isinstance(obj, Mapping) and "modules" in obj and isinstance(obj["modules"], Mapping):
        if len(paths) > 1:
            raise CheckpointError(f"{name}: a speechtrain checkpoint carries every module: give it alone")
        report = ImportReport("speechtrain", name)
        out = {
            mod: map_state_dict(tensors_only(sd, f"module '{mod}'", name), lambda k: k, report, f"{mod}.", f"{mod}.")
            for mod, sd in obj["modules"].items()
        }
        for key in obj:
            if key != "modules":
                report.skipped.append((key, "trainer state: init_from starts a fresh optimizer and step 0"))
        return ImportedCheckpoint(out, report)
    if importers is None:
        from speechtrain import registry

        importers = registry.checkpoint_importers()
    found = [imp for imp in importers if imp.claims(obj)]
    if not found:
        held = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
        layouts = ", ".join(["a speechtrain run or checkpoint", *(imp.layout for imp in importers)])
        raise CheckpointError(f"{name}: not a checkpoint layout train.init_from reads ({layouts}); it holds {held}")
    importer = found[0]
    if len(paths) > 1 and importer.pair is None:
        raise CheckpointError(f"{name}: {importer.layout} is one file: drop {paths[1]}")
    imported = importer.load(obj, paths[1] if len(paths) > 1 else None, trust_pickle)
    imported.report.source = imported.report.source.replace("state dict", name, 1)
    return imported
