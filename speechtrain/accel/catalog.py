"""The table of accelerations: every module of :mod:`speechtrain.accel` that declares one.

An acceleration is one module (``speechtrain/accel/<name>.py``) holding its pure function
``apply_xxx(model, ...) -> AccelRecord`` (callable from a user's own loop) and, at module level,
``ACCELERATION = Acceleration(...)``: its config key, exactness, how :func:`apply_accelerations` calls
it, the rule the hardware probe follows for ``auto``, its rung in the ablation ladder, the devices it
works on and its docs card. The probe (:func:`speechtrain.accel.probe.decide`), the apply path
(:func:`speechtrain.accel.apply.apply_accelerations`), the ladder (:mod:`speechtrain.bench.ablate`) and
the cards of docs/accelerations.md loop over :func:`accelerations`; nobody else names them.

Adding one: a new module here with ``ACCELERATION`` and its field in ``AccelConfig`` (``accel.<name>``);
``tests/test_accel_catalog.py`` checks that the config's switches and the table's keys are the same and
that docs/accelerations.md holds every card (``python -m speechtrain.accel.cards`` rewrites them).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    import torch
    from torch import nn

    from speechtrain.accel.hardware import HardwareInfo
    from speechtrain.config import AccelConfig

#: a probe rule: the recommended value for this hardware and the reason, or None (no advice here)
ProbeRule = Callable[["HardwareInfo"], "tuple[Any, str] | None"]


@dataclass
class ApplyContext:
    """What an acceleration's apply step gets besides its resolved value: the models (already on
    ``device``), the device, the whole ``accel`` section (for options such as ``compile_mode``), what
    the probe found, and the precision plan once the precision acceleration has set it."""

    modules: dict[str, nn.Module]
    device: torch.device
    section: AccelConfig
    hardware: HardwareInfo | None = None
    precision: Any = None  # PrecisionPlan, set by the precision acceleration
    avoid_bf16: str | None = None  # the model family's reason against bf16 (precision auto then picks fp16)
    batch_shapes: int | None = None  # distinct batch shapes the loader plans for an epoch (None: unknown)
    buckets: int | None = None  # its duration buckets
    loader_workers: int = 0  # its worker processes

    def per_module(self, name: str, fn: Callable[[nn.Module], AccelRecord]) -> AccelRecord:
        """``fn`` on every module, merged into one record named ``name`` (a GAN's generator and
        discriminator each get it)."""
        from speechtrain.accel.record import merge_records

        if not self.modules:
            return AccelRecord(name, False, True, "no modules")
        return merge_records(name, {mod_name: fn(m) for mod_name, m in self.modules.items()})


@dataclass(frozen=True)
class Rung:
    """The acceleration's row in the ablation ladder (``speechtrain bench --ablate``): ``overrides`` on
    top of the "all off" row; ``records``: the AccelRecord names that say whether it took effect;
    ``took_effect(record)``: whether a record (as written in the run, a dict) counts as taking effect
    (default: its ``applied``); ``skip_keeps_off``: ``--skip <key>`` also keeps it off in the "all" row
    (compile: its compile time is why one skips it)."""

    key: str
    label: str
    overrides: Mapping[str, Any]
    records: tuple[str, ...]
    took_effect: Callable[[Mapping[str, Any]], bool] | None = None
    skip_keeps_off: bool = False


#: a rung whose label or overrides depend on the device type and the hardware recommendation
RungRule = Callable[[str, Mapping[str, Any]], Rung]


@dataclass(frozen=True)
class Card:
    """The docs card of an acceleration (docs/accelerations.md): what it does, when it helps, what it
    costs, how ``auto`` decides and how a user's own loop calls it. Markdown, one paragraph each."""

    title: str
    what: str
    helps: str
    costs: str
    exact_note: str = ""
    auto: str = ""
    own_loop: str = ""
    more: tuple[str, ...] = ()  # further bullets, markdown, each "**Label**: text"


def _off_value(value: Any) -> Callable[[str], Any]:
    return lambda device_type: value


@dataclass(frozen=True)
class Acceleration:
    """One acceleration as the rest of the library sees it.

    ``key``: its config path (``accel.tf32``; ``optim.implementation`` for the optimizer kernel).
    ``record``: the name of its AccelRecord. ``exact``: the same maths (only rounding order may differ)
    rather than an approximation. ``apply(value, ctx)``: what :func:`apply_accelerations` calls with the
    resolved setting (None: another piece applies it, e.g. the optimizer kernel is chosen by
    ``build_optimizer``). ``resolve(configured, ctx)``: the setting to apply and why (default:
    the configured value, ``auto`` through ``probe``). ``probe(info)``: the recommended value and reason
    on this hardware (None: no rule). ``off(device_type)``: the value in the ladder's "all off" row (None:
    the ladder leaves the configured value, e.g. ``deterministic``, which is no speed-up).
    ``rung``: its ladder row (a :class:`Rung`, or a function of the device type and the recommendation),
    None when it has none. ``devices``: where it can take effect (``device_note``: why not elsewhere).
    ``options``: further config keys of the same acceleration (``accel.compile_mode``). ``order``: when
    it is applied (the ones that change modules before compile, 90); also the ladder's row order.
    """

    key: str
    record: str
    exact: bool
    card: Card
    order: int
    apply: Callable[[Any, ApplyContext], AccelRecord] | None = None
    probe: ProbeRule | None = None
    resolve: Callable[[Any, ApplyContext], tuple[Any, str]] | None = None
    off: Callable[[str], Any] | None = field(default_factory=lambda: _off_value(False))
    rung: Rung | RungRule | None = None
    devices: tuple[str, ...] = ("cuda", "cpu")
    device_note: str = ""
    options: tuple[str, ...] = ()

    @property
    def section(self) -> str:
        """The config section of its key (``accel`` or ``optim``)."""
        return self.key.split(".", 1)[0]

    @property
    def field(self) -> str:
        """Its field name in the section."""
        return self.key.split(".", 1)[1]

    def rung_for(self, device_type: str, recommended: Mapping[str, Any]) -> Rung | None:
        """Its ladder row on ``device_type`` with the recommendation ``recommended`` (``{key: value}``)."""
        if self.rung is None or isinstance(self.rung, Rung):
            return self.rung
        return self.rung(device_type, recommended)

    def runs_on(self, device_type: str) -> bool:
        return device_type in self.devices


def module_names() -> list[str]:
    """Every module of the ``speechtrain.accel`` package (the table is read from those that declare)."""
    import speechtrain.accel as package

    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


@functools.cache
def accelerations() -> tuple[Acceleration, ...]:
    """The table: every ``ACCELERATION`` declared by a module of :mod:`speechtrain.accel`, in ``order``."""
    found: dict[str, Acceleration] = {}
    for name in module_names():
        module = importlib.import_module(f"speechtrain.accel.{name}")
        acc = getattr(module, "ACCELERATION", None)
        if acc is None:
            continue
        if not isinstance(acc, Acceleration):
            raise TypeError(f"speechtrain.accel.{name}.ACCELERATION is a {type(acc).__name__}, not an Acceleration")
        if acc.key in found:
            raise ValueError(f"two modules declare the acceleration {acc.key}")
        found[acc.key] = acc
    return tuple(sorted(found.values(), key=lambda a: (a.order, a.key)))


def by_key(key: str) -> Acceleration:
    """The acceleration whose config key is ``key`` (``accel.tf32``)."""
    for acc in accelerations():
        if acc.key == key:
            return acc
    raise KeyError(f"no acceleration declares {key!r} (known: {', '.join(a.key for a in accelerations())})")
