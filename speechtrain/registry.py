"""Model families by name. Strings only, so that reading a config imports no model code.

Each family is a package with ``config.py`` (a pydantic class subclassing
:class:`speechtrain.config.ModelSection`; it imports no torch, so reading a config stays light)
and ``task.py`` (``build_task(cfg: Config) -> Task``).
A user model is named ``package.module:factory`` instead; its keys pass through unchecked and
``factory(cfg)`` must return a :class:`speechtrain.train.task.Task`.
"""

from __future__ import annotations

import importlib
from typing import Any

MODELS: dict[str, tuple[str, str]] = {
    # name: (package, config class in PACKAGE.config); PACKAGE.task defines build_task(cfg)
    "toy": ("speechtrain.testing.toy", "ToyConfig"),
    "toy_gan": ("speechtrain.testing.toy", "ToyGANConfig"),
    "hifigan": ("speechtrain.models.hifigan", "HiFiGANConfig"),
    "nsf_hifigan": ("speechtrain.models.nsf_hifigan", "NSFHiFiGANConfig"),
    "gpt_tts": ("speechtrain.models.gpt_tts", "GPTTTSConfig"),
    "cnn_lstm": ("speechtrain.models.cnn_lstm", "CNNLSTMConfig"),
    "vits": ("speechtrain.models.vits", "VITSConfig"),
}


def _is_user_factory(name: str) -> bool:
    return ":" in name


def model_config_class(name: str) -> Any:
    """The pydantic config class for a model family name (KeyError with the valid names)."""
    from speechtrain.config import OpaqueModelConfig

    if _is_user_factory(name):
        return OpaqueModelConfig
    if name not in MODELS:
        import difflib

        hint = difflib.get_close_matches(name, list(MODELS), n=1)
        msg = f"unknown model.name '{name}'"
        msg += f"; did you mean '{hint[0]}'?" if hint else ""
        msg += f" (built-in: {', '.join(MODELS)}; or 'package.module:factory' for your own)"
        raise KeyError(msg)
    package, cls = MODELS[name]
    return getattr(importlib.import_module(package + ".config"), cls)


def build_task(cfg: Any) -> Any:
    """Build the Task for ``cfg.model.name``."""
    name = cfg.model.name
    if _is_user_factory(name):
        module, func = name.split(":", 1)
        return getattr(importlib.import_module(module), func)(cfg)
    package, _ = MODELS[name]
    return importlib.import_module(package + ".task").build_task(cfg)
