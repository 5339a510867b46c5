"""The two stages of a GAN task, shared by every GAN family (VITS, HiFi-GAN, the toy GAN).

One optimizer step runs ``disc`` (the discriminators learn real from generated) then ``gen`` (the
generator learns to fool them), each over every micro-batch. :class:`GANStages` owns what the two
stages share and what each must not touch:

- **the stage cache**: the generator's output of a micro-batch is made once, in ``disc``, kept with
  its autograd graph in the micro-batch's cache, and consumed by ``gen`` (which makes it again when
  the cache is empty, as after an OOM split);
- **the other network is frozen** while a stage runs: ``requires_grad`` is off for the parameters the
  stage does not update, so autograd builds no graph into them and the backward computes no
  gradient for them. In ``gen`` that spares the discriminators' weight gradients (which the next
  ``disc`` stage would throw away); in ``disc`` the generator output arrives detached anyway. The
  generator's forward for the cache runs before the freeze, so its graph is there for ``gen``.

Freezing changes no loss and no generator gradient (the discriminator still passes gradients to
its inputs); it only drops work whose result was discarded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn

from speechtrain.train.task import OptimizerSpec

T = TypeVar("T")

DISC, GEN = "disc", "gen"


class GANStages:
    """Stage bookkeeping of a GAN task whose modules are named ``generators`` and ``discriminators``."""

    def __init__(self, modules: dict[str, nn.Module], generators: list[str], discriminators: list[str]) -> None:
        unknown = [n for n in (*generators, *discriminators) if n not in modules]
        if unknown:
            raise ValueError(f"GANStages: {unknown} are not modules of the task ({list(modules)})")
        self.modules = modules
        self.updated = {DISC: list(discriminators), GEN: list(generators)}
        self._trainable: dict[tuple[str, ...], list[nn.Parameter]] = {}  # listed once per set of modules

    def optimizer_specs(self) -> list[OptimizerSpec]:
        """``disc`` then ``gen``, each over its own networks."""
        return [OptimizerSpec(DISC, self.updated[DISC]), OptimizerSpec(GEN, self.updated[GEN])]

    def check(self, stage: str, family: str) -> None:
        """ValueError for a stage name other than ``disc`` / ``gen``."""
        if stage not in self.updated:
            raise ValueError(f"unknown stage {stage!r} ({family} has 'disc' and 'gen')")

    @contextlib.contextmanager
    def stage(
        self, stage: str, cache: dict[str, Any], make: Callable[[], T], keep_graph: bool = True, key: str = "fake"
    ) -> Iterator[T]:
        """The micro-batch's generator output for ``stage``, with the networks ``stage`` does not update
        frozen inside the block.

        ``make()`` runs the generator. In ``disc`` its output is kept in ``cache[key]`` for ``gen``
        when ``keep_graph`` (else it is made under ``no_grad`` and not kept). In ``gen`` the kept output
        is taken out of the cache, or made again when there is none (or it was made without
        gradients and gradients are on now).
        """
        output = self._output(stage, cache, make, keep_graph, key)
        with self.frozen([n for s, names in self.updated.items() if s != stage for n in names]):
            yield output

    def _output(self, stage: str, cache: dict[str, Any], make: Callable[[], T], keep_graph: bool, key: str) -> T:
        made_with_grad = f"{key}:made_with_grad"
        if stage == DISC:
            if key in cache:
                return cache[key]
            if not keep_graph:
                with torch.no_grad():
                    return make()
            out = cache[key] = make()
            cache[made_with_grad] = torch.is_grad_enabled()
            return out
        out, with_grad = cache.pop(key, None), cache.pop(made_with_grad, False)  # the graph is consumed here
        if out is None or (torch.is_grad_enabled() and not with_grad):
            return make()
        return out

    @contextlib.contextmanager
    def frozen(self, names: list[str]) -> Iterator[None]:
        """``requires_grad`` off for the trainable parameters of the modules ``names`` inside the block (listed
        at the first call, when none of them is frozen: a Python walk over every parameter in every stage of
        every step is host time the GPU waits for)."""
        key = tuple(names)
        if key not in self._trainable:
            self._trainable[key] = [p for n in names for p in self.modules[n].parameters() if p.requires_grad]
        params = self._trainable[key]
        for p in params:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p in params:
                p.requires_grad_(True)
