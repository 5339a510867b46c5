"""Mixed precision: which autocast dtype, whether a grad scaler is needed, and the safer fallback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from speechtrain.accel.catalog import Acceleration, ApplyContext, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def bf16_supported(device: str | torch.device) -> bool:
    """bf16 autocast is worth using on ``device``: CUDA compute capability 8.0+ (Ampere), or the CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return False
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_capability(index) >= (8, 0)
    return dev.type == "cpu"


@dataclass
class PrecisionPlan:
    """How a run computes: ``name`` is bf16, fp16 or fp32; ``amp_dtype`` the autocast dtype
    (``None`` for fp32); ``use_grad_scaler`` is true for fp16 only."""

    name: str
    device_type: str
    reason: str
    requested: str = "auto"
    #: why this model should not train in bf16 (its reference warns against it), or None: then ``auto`` and the
    #: non-finite fallback from fp16 never choose bf16
    avoid_bf16: str | None = None

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return _DTYPES[self.name]

    @property
    def use_grad_scaler(self) -> bool:
        return self.name == "fp16"

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` on the device type in ``amp_dtype``; a no-op context for fp32."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.amp_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler for this plan (disabled, i.e. a pass-through, unless fp16)."""
        return torch.amp.GradScaler(self.device_type, enabled=self.use_grad_scaler)

    def fallback(self) -> PrecisionPlan | None:
        """The next safer plan: fp16 -> bf16 where supported (unless ``avoid_bf16``), else fp32; bf16 -> fp32;
        fp32 -> None."""
        if self.name == "fp16" and bf16_supported(self.device_type) and self.avoid_bf16 is None:
            return PrecisionPlan("bf16", self.device_type, "fallback from fp16 (non-finite losses)", self.requested)
        if self.name in ("fp16", "bf16"):
            why = f"fallback from {self.name} (non-finite losses)"
            return PrecisionPlan("fp32", self.device_type, why, "fp32", self.avoid_bf16)
        return None

    def record(self) -> AccelRecord:
        """The AccelRecord of this plan."""
        applied = self.amp_dtype is not None
        detail = f"{self.name}: {self.reason}"
        if self.use_grad_scaler:
            detail += " (dynamic grad scaler)"
        info = {"requested": self.requested, "dtype": self.name, "grad_scaler": self.use_grad_scaler}
        return AccelRecord("precision", applied, not applied, detail, info)

    def __str__(self) -> str:
        return self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device_type": self.device_type,
            "reason": self.reason,
            "requested": self.requested,
            "amp_dtype": None if self.amp_dtype is None else str(self.amp_dtype).replace("torch.", ""),
            "use_grad_scaler": self.use_grad_scaler,
            "avoid_bf16": self.avoid_bf16,
        }


def resolve_precision(requested: str, device: str | torch.device, avoid_bf16: str | None = None) -> PrecisionPlan:
    """The precision plan for ``requested`` (auto, bf16, fp16, fp32) on ``device``.

    ``auto`` follows the hardware probe (this module's rule, which :func:`speechtrain.accel.probe.decide`
    lists too): bf16 on Ampere or newer, fp16 with a grad scaler on older GPUs, fp32 on the CPU.
    ``avoid_bf16`` (the model family's reason, e.g. its reference warns that bf16 hurts sound quality) turns
    auto's bf16 into fp16 with a grad scaler, saying why; an explicit bf16 is kept, with the warning in its
    reason. An explicit bf16 on a GPU
    without bf16 tensor cores is a ConfigError (before any GPU work) naming the fix.
    """
    from speechtrain.config import ConfigError

    dev = torch.device(device)
    if requested not in ("auto", *_DTYPES):
        raise ConfigError(f"accel.precision: unknown value '{requested}' (auto, bf16, fp16, fp32)")
    if requested == "auto":
        from speechtrain.accel.hardware import cached_probe

        value, reason = _rule(cached_probe(str(dev)))
        if value == "bf16" and avoid_bf16 is not None:
            why = f"auto: fp16 with a grad scaler instead of bf16 ({reason}), because {avoid_bf16}"
            return PrecisionPlan("fp16", dev.type, why, "auto", avoid_bf16)
        return PrecisionPlan(value, dev.type, f"auto: {reason}", "auto", avoid_bf16)
    if requested == "bf16" and not bf16_supported(dev):
        raise ConfigError(
            f"accel.precision=bf16: {dev} has no bf16 support (needs CUDA compute capability 8.0+); "
            "use accel.precision=fp16 (with grad scaler) or accel.precision=auto"
        )
    if requested == "fp16" and dev.type == "cpu":
        reason = "requested; CPU fp16 autocast is slow on most CPUs"
    elif requested == "fp32":
        reason = "requested: full precision, no autocast"
    elif requested == "bf16" and avoid_bf16 is not None:
        reason = f"requested, against the model's advice: {avoid_bf16}"
    else:
        reason = "requested"
    return PrecisionPlan(requested, dev.type, reason, requested, avoid_bf16)


@contextlib.contextmanager
def fp32_region() -> Iterator[None]:
    """Turn autocast off (CUDA and CPU) for a loss that needs fp32 (STFT losses, log of small
    values, long reductions). Cast the inputs with ``.float()`` inside the region."""
    with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
        yield


def _rule(info: HardwareInfo) -> tuple[str, str]:
    if not info.has_gpu:
        if info.cpu_bf16:
            return "fp32", (
                "no GPU; the CPU has bf16 units (AVX512-BF16/AMX), but bf16 autocast pays only for some models "
                "(measured 1.33x on the tiny GPT-TTS, 0.77x on the CNN-LSTM: docs/benchmarks.md); "
                "set accel.precision=bf16 to try yours"
            )
        return "fp32", "no GPU: CPU autocast (bf16) is slower than fp32 on CPUs without bf16 units"
    cc = info.compute_capability or (0, 0)
    cc_text = f"compute capability {cc[0]}.{cc[1]}"
    if info.ampere_or_newer:
        return "bf16", f"{cc_text} has bf16 tensor cores: fp32 range, no grad scaler needed"
    return "fp16", f"{cc_text} has no bf16 tensor cores: fp16 with a dynamic grad scaler"


def _resolve(configured: Any, ctx: ApplyContext) -> tuple[PrecisionPlan, str]:
    plan = resolve_precision(configured, ctx.device, ctx.avoid_bf16)
    return plan, plan.reason


def _apply(plan: PrecisionPlan, ctx: ApplyContext) -> AccelRecord:
    ctx.precision = plan
    return plan.record()


def _rung(device_type: str, recommended: Mapping[str, Any]) -> Rung:
    # CPU autocast exists: measured on the CPU too, though the recommendation keeps fp32 there
    precision = recommended.get("accel.precision", "bf16") if device_type == "cuda" else "bf16"
    precision = precision if precision in ("bf16", "fp16") else "bf16"
    return Rung("precision", f"+ {precision} autocast", {"accel.precision": precision}, ("precision",))


ACCELERATION = Acceleration(
    key="accel.precision",
    record="precision",
    exact=False,
    order=40,
    apply=_apply,
    resolve=_resolve,
    probe=_rule,
    off=lambda device_type: "fp32",
    rung=_rung,
    card=Card(
        title="Mixed precision",
        what="runs matmuls and convolutions under `torch.autocast` in bf16 or fp16; weights, optimizer state and "
        "reductions stay fp32. fp16 adds a dynamic `GradScaler` (its range is too small for small gradients).",
        helps="2-3x less activation memory and tensor-core speed on every NVIDIA GPU from Volta (fp16) and Ampere "
        "(bf16) on.",
        costs="precision. fp16 can overflow (the Trainer falls back after `train.nan_fallback_after` non-finite "
        "steps: fp16 -> bf16 where supported (and not avoided, below) -> fp32, `PrecisionPlan.fallback()`).",
        auto="bf16 on compute capability 8.0+, fp16 + grad scaler on older GPUs, fp32 on the CPU. An explicit `bf16` "
        "on a GPU without bf16 is a config error before any GPU work. A family whose reference warns against bf16 "
        "says so (`avoid_bf16` on its config class; today `nsf_hifigan`: SingingVocoders' README, \"it may cause "
        'sound quality problems"): for it `auto` picks fp16 with a grad scaler where it would pick bf16, the fp16 '
        "fallback goes to fp32 instead of bf16, and `accel.json` says why (`precision.reason`, "
        "`precision.avoid_bf16`); an explicit `accel.precision=bf16` is kept, its reason saying it goes against "
        "the family's advice.",
        own_loop='`plan = resolve_precision("auto", device)` (a family that avoids bf16: '
        '`resolve_precision("auto", device, avoid_bf16=NSFHiFiGANConfig.avoid_bf16)`); '
        "`with plan.autocast(): ...`; `plan.grad_scaler()`; "
        "losses that need fp32 (STFT, log of small values): `with fp32_region(): loss = stft_loss(y.float(), "
        "y_hat.float())`.",
    ),
)
