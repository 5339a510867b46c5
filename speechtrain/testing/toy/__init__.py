"""Tiny models for tests and for users rehearsing the engine (in the package, as lhotse does).

They are not production families: :func:`register` adds ``toy`` and ``toy_gan`` to the registry
(and makes ``toy`` the family of a config that names none). The test-suite calls it on import
(``tests/__init__.py``); a user may call it, or name the factory directly:
``model.name=speechtrain.testing.toy.task:build_toy`` (the keys then pass unchecked).
"""

from __future__ import annotations


def register(default: bool = True) -> None:
    """Register ``toy`` (the default family when ``default``) and ``toy_gan`` as model families."""
    from speechtrain.registry import register_family

    register_family("toy", "speechtrain.testing.toy", "ToyConfig", default=default)
    register_family("toy_gan", "speechtrain.testing.toy", "ToyGANConfig")
