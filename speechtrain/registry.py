"""Model families by name. Strings only, so that reading a config imports no model code.

A family is a package with ``config.py`` (a pydantic class subclassing
:class:`speechtrain.config.ModelSection`; no torch import there, so reading a config stays light)
and ``task.py`` with the factory ``build_task(model, data) -> Task``: ``model`` is the family's own
validated section, ``data`` the :class:`speechtrain.config.DataConfig`. That is all a family is
built from; nothing below the recipe layer sees the whole Config.

A user model is named ``package.module:factory`` instead: its keys pass through unchecked
(``model.model_extra``) and ``factory(model, data)`` must return a :class:`speechtrain.train.task.Task`.

The production table lists the real families only. :func:`register_family` adds one at run time
(a plug-in, or the toy tasks of :mod:`speechtrain.testing`, which only the test-suite registers);
:func:`registered_families` lists those additions so that a child process (``bench`` isolates each
measured configuration in one) can register them again.

Besides its package, a family declares what it offers beyond training (``offers``: the capability names of
:mod:`speechtrain.capabilities`, each a typed Protocol its task class must satisfy), its optimizer stages (a GAN
has two, which FSDP2 cannot shard: ``train.strategy=fsdp`` is refused when such a config is read) and whether its
package holds checkpoint importers (``<package>.importers`` with ``IMPORTERS``, for ``train.init_from``). A family
added with :func:`register_family` is checked against its declared capabilities there and then; the built-in ones
when their task is first built (:func:`check_family`; the test-suite checks every one).

This module imports nothing of speechtrain but the errors and the capability Protocols: ``config`` asks it for a
family's config class and stages, the recipe layer asks it for a task, its capabilities and the importers.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from speechtrain.capabilities import check_offers
from speechtrain.errors import UserError

#: the optimizer stages of a GAN family (discriminator, then generator)
GAN_STAGES = ("disc", "gen")


@dataclass(frozen=True)
class Family:
    """A model family: its package (holding ``config.py`` and ``task.py``), its config and task class names,
    what its task offers beyond training (capability names, see :mod:`speechtrain.capabilities`), its optimizer
    stages, and whether ``<package>.importers`` holds checkpoint importers (``IMPORTERS``)."""

    name: str
    package: str
    config_class: str
    task_class: str = ""
    offers: tuple[str, ...] = ()
    stages: tuple[str, ...] = ("main",)
    importers: bool = False
    #: one line for the docs' matrix: what the family is
    summary: str = ""
    #: the quality metrics its evaluations get (a kind of speechtrain.quality.catalog.KINDS; "" none), the same
    #: as its task class's ``quality_kind``: read here so that a config's ``train.best_metric`` is checked
    #: without importing the model
    quality: str = ""

    def offers_any(self, *names: str) -> bool:
        return any(n in self.offers for n in names)

    def fsdp_refusal(self) -> str | None:
        """Why ``train.strategy=fsdp`` cannot shard this family (None: it can)."""
        if len(self.stages) > 1:
            return (
                f"{self.name} trains {len(self.stages)} optimizer stages ({', '.join(self.stages)}: a GAN); FSDP2 "
                f"shards a task of one stage"
            )
        return None


BUILT_IN: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "hifigan",
            "speechtrain.models.hifigan",
            "HiFiGANConfig",
            "HiFiGANTask",
            ("vocode", "fold_for_inference"),
            GAN_STAGES,
            importers=True,
            summary="HiFi-GAN vocoder (mel -> audio)",
            quality="vocoder",
        ),
        Family(
            "nsf_hifigan",
            "speechtrain.models.nsf_hifigan",
            "NSFHiFiGANConfig",
            "NSFHiFiGANTask",
            ("vocode_f0", "fold_for_inference"),
            GAN_STAGES,
            importers=True,
            summary="NSF-HiFiGAN vocoder (mel + f0 -> audio)",
            quality="pitch_vocoder",
        ),
        Family(
            "gpt_tts",
            "speechtrain.models.gpt_tts",
            "GPTTTSConfig",
            "GPTTTSTask",
            ("synthesize", "shared_setup", "text_vocabulary"),
            summary="GPT-TTS (text -> mel codes -> audio)",
            quality="tts",
        ),
        Family(
            "cnn_lstm",
            "speechtrain.models.cnn_lstm",
            "CNNLSTMConfig",
            "CNNLSTMTask",
            ("classify",),
            summary="CNN-LSTM audio classifier",
            quality="classifier",
        ),
        Family(
            "vits",
            "speechtrain.models.vits",
            "VITSConfig",
            "VITSTask",
            ("synthesize", "text_vocabulary"),
            GAN_STAGES,
            importers=True,
            summary="VITS end-to-end TTS",
            quality="tts",
        ),
        Family(
            "xtts",
            "speechtrain.models.xtts",
            "XttsConfig",
            "XttsTask",
            ("synthesize", "export", "fsdp_forward_methods"),
            summary="Coqui XTTS-v2 fine-tuning",
            quality="speaker_tts",
        ),
    )
}
_added: dict[str, Family] = {}
_default: str | None = None
_checked: set[str] = set()


def register_family(
    name: str,
    package: str,
    config_class: str,
    default: bool = False,
    *,
    task_class: str = "",
    offers: tuple[str, ...] | list[str] = (),
    stages: tuple[str, ...] | list[str] = ("main",),
    importers: bool = False,
    summary: str = "",
    quality: str = "",
) -> None:
    """Add a family at run time; ``default`` makes it the family of a config without ``model.name``.

    With ``task_class`` (the class in ``<package>.task``) its declared ``offers`` are checked now: a TypeError
    names each capability member the class lacks."""
    global _default
    if ":" in name:
        raise ValueError(f"a family name cannot contain ':' ({name!r} reads as package.module:factory)")
    fam = Family(name, package, config_class, task_class, tuple(offers), tuple(stages), importers, summary, quality)
    if task_class:
        check_offers(name, task_type(fam), fam.offers)
        _checked.add(name)
    elif fam.offers:
        raise TypeError(f"model family '{name}': give task_class= so that its offers {fam.offers} can be checked")
    _added[name] = fam
    if default:
        _default = name


def registered_families() -> dict[str, Any]:
    """The families added with :func:`register_family` and the default, as plain data (JSON-safe)."""
    return {
        "families": [
            [f.name, f.package, f.config_class, f.task_class, list(f.offers), list(f.stages), f.importers]
            for f in _added.values()
        ],
        "default": _default,
    }


def register_all(state: dict[str, Any]) -> None:
    """Register again what :func:`registered_families` returned (in a child process)."""
    for name, package, config_class, task_class, offers, stages, importers in state.get("families", []):
        register_family(
            name,
            package,
            config_class,
            default=name == state.get("default"),
            task_class=task_class,
            offers=offers,
            stages=stages,
            importers=importers,
        )


def task_type(fam: Family) -> type:
    """The task class of a family (imports its task module)."""
    if not fam.task_class:
        raise TypeError(f"model family '{fam.name}' names no task class")
    return getattr(importlib.import_module(fam.package + ".task"), fam.task_class)


def check_family(name: str) -> Family:
    """The family ``name``, its task class checked (once) against the capabilities it declares."""
    fam = family(name)
    if name not in _checked:
        if fam.task_class:
            check_offers(name, task_type(fam), fam.offers)
            declared = getattr(task_type(fam), "quality_kind", "")
            if declared != fam.quality:
                raise TypeError(
                    f"model family '{name}': its task's quality_kind is {declared!r}, its entry's {fam.quality!r}"
                )
        _checked.add(name)
    return fam


def checkpoint_importers() -> list[Any]:
    """Every family's checkpoint importers (``IMPORTERS`` of ``<package>.importers``), in registry order: what
    ``train.init_from`` chooses among (each importer says which files it reads)."""
    out: list[Any] = []
    for fam in families().values():
        if fam.importers:
            out += list(importlib.import_module(fam.package + ".importers").IMPORTERS)
    return out


def quality_kind(name: str | None) -> str | None:
    """The quality kind of model ``name`` (None: a user's own model or a family that declares none, whose eval
    keys are known only when it runs)."""
    if name is None or is_user_factory(name):
        return None
    return family(name).quality or None


def default_family() -> str | None:
    """The family of a config that names none (None in production: ``model.name`` must be set)."""
    return _default


def families() -> dict[str, Family]:
    """Every known family by name: the built-in ones, then the registered ones."""
    return {**BUILT_IN, **_added}


def is_user_factory(name: str) -> bool:
    """``package.module:factory`` rather than a family name."""
    return ":" in name


def family(name: str) -> Family:
    """The family called ``name`` (KeyError naming the closest one and the valid names)."""
    known = families()
    if name not in known:
        hint = difflib.get_close_matches(name, list(known), n=1)
        msg = f"unknown model.name '{name}'"
        msg += f"; did you mean '{hint[0]}'?" if hint else ""
        msg += f" (built-in: {', '.join(known)}; or 'package.module:factory' for your own)"
        raise KeyError(msg)
    return known[name]


def model_config_class(name: str) -> type | None:
    """The pydantic class of family ``name``'s model section; None for a user factory (keys unchecked)."""
    if is_user_factory(name):
        return None
    f = family(name)
    return getattr(importlib.import_module(f.package + ".config"), f.config_class)


def import_user_module(name: str, module: str, search: Sequence[Path] = ()) -> ModuleType:
    """The module of a user's ``module:factory`` (``name``): from the import path, else from the
    working directory or the ``search`` folders (a console script, unlike ``python -m``, does not put
    the working directory on the path). UserError when it is nowhere, naming where it looked."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name != top and not module.startswith(exc.name + "."):
            raise UserError(  # the user's module was found, something it imports was not
                f"model.name={name}: importing {module} failed: {exc}; install what it imports"
            ) from None
    folders = list(dict.fromkeys(p.resolve() for p in [Path.cwd(), *search]))
    for folder in folders:
        if (folder / top).is_dir() or (folder / f"{top}.py").is_file():
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
            importlib.invalidate_caches()
            try:
                return importlib.import_module(module)
            except ModuleNotFoundError as exc:
                raise UserError(f"model.name={name}: importing {module} from {folder} failed: {exc}") from None
    raise UserError(
        f"model.name={name}: no module '{module}' on the import path, in the working directory or in the "
        f"config's folder (looked in {', '.join(str(f) for f in folders)}); run from the folder that holds "
        f"'{top}', or add that folder to PYTHONPATH"
    )


def derived_features(model: Any, data: Any, search: Sequence[Path] = ()) -> list[Any]:
    """The derived features (``speechtrain.data.derived.DerivedFeature``) that family ``model.name`` asks
    ``prepare`` to cache: its task module's (or a user model's module's) optional
    ``derived_features(model, data)``; none when it has none or no model is named."""
    return list(_family_hook(model, "derived_features", search)(model, data))


def item_limits(model: Any, data: Any, search: Sequence[Path] = ()) -> list[Any]:
    """The item limits (``speechtrain.data.limits.ItemLimits``) that family ``model.name`` asks ``prepare`` to
    apply: its task module's (or a user model's module's) optional ``item_limits(model, data)``; none when it
    has none or no model is named."""
    return list(_family_hook(model, "item_limits", search)(model, data))


def _family_hook(model: Any, hook_name: str, search: Sequence[Path]) -> Any:
    """The family task module's function ``hook_name``, or one that returns nothing."""
    name = model.name
    if name is None:
        return lambda *args: []
    if is_user_factory(name):
        imported = import_user_module(name, name.split(":", 1)[0], search)
    else:
        imported = importlib.import_module(family(name).package + ".task")
    return getattr(imported, hook_name, None) or (lambda *args: [])


def build_task(model: Any, data: Any, search: Sequence[Path] = ()) -> Any:
    """The Task of family ``model.name`` from its model section and the data section (a user's
    ``module:factory`` is also looked for in the ``search`` folders: the config's folder)."""
    name = model.name
    if name is None:
        raise UserError(f"model.name is not set: choose a family ({', '.join(families())}) or 'package.module:factory'")
    if not is_user_factory(name):
        return importlib.import_module(check_family(name).package + ".task").build_task(model, data)
    module, func = name.split(":", 1)
    imported = import_user_module(name, module, search)
    try:
        factory = getattr(imported, func)
    except AttributeError:
        raise UserError(f"model.name={name}: {module} has no '{func}' (a function taking (model, data))") from None
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no introspectable signature (a C function): call it as it is
        signature = None
    try:
        if signature is not None:
            signature.bind(model, data)
    except TypeError:
        raise UserError(
            f"model.name={name}: the factory must take (model, data): the model section (your keys in "
            f"model.model_extra) and the data section, and return a Task; see examples/own_model.py"
        ) from None
    try:
        return factory(model, data)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: say where it failed, without a traceback
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        message = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise UserError(
            f"model.name={name}: the factory {func}(model, data) raised {type(exc).__name__}{where}"
            + (f": {message}" if message else "")
            + "; fix your model code or the model.* keys it reads"
        ) from None
