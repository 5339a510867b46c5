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

This module imports nothing of speechtrain but the errors: ``config`` asks it for a family's config
class, the recipe layer asks it for a task.
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

from speechtrain.errors import UserError


@dataclass(frozen=True)
class Family:
    """A model family: its package (holding ``config.py`` and ``task.py``) and its config class name."""

    name: str
    package: str
    config_class: str


BUILT_IN: dict[str, Family] = {
    f.name: f
    for f in (
        Family("hifigan", "speechtrain.models.hifigan", "HiFiGANConfig"),
        Family("nsf_hifigan", "speechtrain.models.nsf_hifigan", "NSFHiFiGANConfig"),
        Family("gpt_tts", "speechtrain.models.gpt_tts", "GPTTTSConfig"),
        Family("cnn_lstm", "speechtrain.models.cnn_lstm", "CNNLSTMConfig"),
        Family("vits", "speechtrain.models.vits", "VITSConfig"),
        Family("xtts", "speechtrain.models.xtts", "XttsConfig"),
    )
}
_added: dict[str, Family] = {}
_default: str | None = None


def register_family(name: str, package: str, config_class: str, default: bool = False) -> None:
    """Add a family at run time; ``default`` makes it the family of a config without ``model.name``."""
    global _default
    if ":" in name:
        raise ValueError(f"a family name cannot contain ':' ({name!r} reads as package.module:factory)")
    _added[name] = Family(name, package, config_class)
    if default:
        _default = name


def registered_families() -> dict[str, Any]:
    """The families added with :func:`register_family` and the default, as plain data (JSON-safe)."""
    return {"families": [[f.name, f.package, f.config_class] for f in _added.values()], "default": _default}


def register_all(state: dict[str, Any]) -> None:
    """Register again what :func:`registered_families` returned (in a child process)."""
    for name, package, config_class in state.get("families", []):
        register_family(name, package, config_class, default=name == state.get("default"))


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
        return importlib.import_module(family(name).package + ".task").build_task(model, data)
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
