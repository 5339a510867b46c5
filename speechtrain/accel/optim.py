"""Optimizers: AdamW/Adam/SGD with the fastest update kernel, and Muon + AdamW as one optimizer.

Muon rule (which parameters it updates): every trainable tensor with 2 or more dimensions that is
a real matrix (more than one row and more than one column once viewed as ``out x (in * k)``),
except

- ``nn.Embedding`` weights (and output layers tied to them),
- output heads: modules whose name is or ends with ``head`` (``head``, ``lm_head``,
  ``mel_head``...) or is ``classifier``,
- weight-norm magnitudes (``weight_g``, ``parametrizations.weight.original0``),

which, with every 1-D tensor (biases, norm scales), go to AdamW. Conv weights ``(out, in, k)``
are orthogonalised as ``(out, in * k)`` matrices. 2-D weights use ``torch.optim.Muon``; conv
weights use :class:`FlatMuon`, the same update on the flattened view. The update of a
``rows x cols`` matrix is ``muon_lr x sqrt(max(1, rows / cols))`` times the orthogonalised momentum.

``optim.muon_variant: singingvocoders`` is openvpi/SingingVocoders' ``Muon_AdamW`` instead: every
trainable tensor of 2 or more dimensions goes to Muon (output heads and vectors stored as matrices
included) except embeddings and weight-norm magnitudes; the momentum is orthogonalised by their
Newton-Schulz schedule (a different quintic per step, fp32, bf16 on CUDA GPUs of compute capability 8+)
and the update is ``muon_lr x sqrt(max(rows, cols))`` times it: RMS about ``muon_lr`` per element
whatever the shape (:class:`SingingVocodersMuon`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo
    from speechtrain.config import OptimConfig

_HEAD = re.compile(r"(^|\.)(\w*head|classifier)$")
_NS_COEFFS = (3.4445, -4.7750, 2.0315)  # quintic Newton-Schulz coefficients published with Muon


def _orthogonalize(g: torch.Tensor, steps: int, coeffs: tuple[float, float, float], eps: float) -> torch.Tensor:
    """Approximate U V^T of the 2-D ``g = U S V^T`` by a quintic Newton-Schulz iteration (in bf16)."""
    a, b, c = coeffs
    x = g.bfloat16()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b*G + c*G^2
        x = torch.addmm(x, poly, x, beta=a)  # a*X + (b*G + c*G^2) X
    return x.T if tall else x


class _MatrixMuon(torch.optim.Optimizer):
    """What the Muon variants share: matrices only (a tensor of 2 or more dimensions, seen as
    ``out x (in * k)``), Nesterov momentum by ``lerp``, decoupled weight decay, and the step
    ``p -= lr * scale * direction`` where the subclass's ``_direction`` orthogonalises the momentum and
    gives the scale."""

    def _require_matrices(self, what: str) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() < 2:
                    raise ValueError(f"{what}: a parameter of shape {tuple(p.shape)} is not a matrix (needs >= 2-D)")

    def _direction(self, update: torch.Tensor, p: torch.Tensor, group: dict[str, Any]) -> tuple[torch.Tensor, float]:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mom)
                update = p.grad.lerp(buf, mom) if group["nesterov"] else buf
                ortho, scale = self._direction(update, p, group)
                if wd > 0:
                    p.mul_(1 - lr * wd)
                p.add_(ortho.reshape(p.shape).to(p.dtype), alpha=-lr * scale)
        return loss


class FlatMuon(_MatrixMuon):
    """Muon for tensors of 2 or more dimensions: the momentum is orthogonalised as an
    ``out x (in * k)`` matrix. Same update as ``torch.optim.Muon`` (Nesterov momentum, lr scaled
    by ``sqrt(max(1, out / fan_in))``, decoupled weight decay) for 2-D tensors."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.02,
        momentum: float = 0.95,
        weight_decay: float = 0.0,
        nesterov: bool = True,
        ns_steps: int = 5,
        eps: float = 1e-7,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "ns_steps": ns_steps,
            "eps": eps,
        }
        super().__init__(params, defaults)
        self._require_matrices("FlatMuon")

    def _direction(self, update: torch.Tensor, p: torch.Tensor, group: dict[str, Any]) -> tuple[torch.Tensor, float]:
        rows = p.shape[0]
        ortho = _orthogonalize(update.reshape(rows, -1), group["ns_steps"], _NS_COEFFS, group["eps"])
        return ortho, math.sqrt(max(1.0, rows / (p.numel() // rows)))


def _sv_coefficients() -> list[tuple[float, float, float]]:
    # SingingVocoders' per-step quintics (modules/optimizer/muon.py), all but the last divided by a safety
    # factor of 1.01 (a / 1.01, b / 1.01^3, c / 1.01^5); steps beyond the list repeat the last one
    base = [
        (8.28721201814563, -23.595886519098837, 17.300387312530933),
        (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
        (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
        (3.3184196573706015, -2.488488024314874, 0.51004894012372),
        (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
        (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
        (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
        (1.875, -1.25, 0.375),
    ]
    return [(a / 1.01, b / 1.01**3, c / 1.01**5) for a, b, c in base[:-1]] + [base[-1]]


SV_NS_COEFFS = _sv_coefficients()


def _orthogonalize_sv(g: torch.Tensor, steps: int, use_bf16: bool) -> torch.Tensor:
    """SingingVocoders' Newton-Schulz: Frobenius-normalise (eps 1e-7), then one quintic per step from
    :data:`SV_NS_COEFFS`, in fp32 (bf16 when ``use_bf16``), on the smaller Gram matrix."""
    x = g.to(torch.bfloat16 if use_bf16 else torch.float32)
    x = x / x.norm().clamp_min(1e-7)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    coeffs = SV_NS_COEFFS[:steps] + [SV_NS_COEFFS[-1]] * max(0, steps - len(SV_NS_COEFFS))
    for a, b, c in coeffs:
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b*G + c*G^2
        x = torch.addmm(x, poly, x, beta=a)  # a*X + (b*G + c*G^2) X
    return x.T if tall else x


def _bf16_newton_schulz(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


class SingingVocodersMuon(_MatrixMuon):
    """The Muon half of SingingVocoders' ``Muon_AdamW``: Nesterov momentum (``lerp``), the momentum
    orthogonalised as an ``out x (in * k)`` matrix by :func:`_orthogonalize_sv`, decoupled weight decay
    ``p *= 1 - lr * weight_decay``, and the update ``lr x sqrt(max(rows, cols))`` times it."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-4,
        momentum: float = 0.95,
        weight_decay: float = 0.0,
        nesterov: bool = True,
        ns_steps: int = 5,
    ) -> None:
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "nesterov": nesterov}
        super().__init__(params, {**defaults, "ns_steps": ns_steps})
        self._require_matrices("SingingVocodersMuon")

    def _direction(self, update: torch.Tensor, p: torch.Tensor, group: dict[str, Any]) -> tuple[torch.Tensor, float]:
        matrix = update.reshape(p.shape[0], -1)
        ortho = _orthogonalize_sv(matrix, group["ns_steps"], _bf16_newton_schulz(p.device))
        return ortho, max(matrix.shape) ** 0.5


class CombinedOptimizer(torch.optim.Optimizer):
    """Several optimizers stepped as one. ``param_groups`` holds the very dicts of the inner
    optimizers' groups (each tagged ``"kind"``), and all share one ``state``, so LR schedulers,
    ``GradScaler.unscale_/step``, ``zero_grad``, clipping and ``state_dict`` see one optimizer."""

    def __init__(self, parts: list[tuple[str, torch.optim.Optimizer]]) -> None:
        if not parts:
            raise ValueError("CombinedOptimizer needs at least one optimizer")
        groups: list[dict[str, Any]] = []
        for kind, opt in parts:
            for g in opt.param_groups:
                g["kind"] = kind
                groups.append(g)
        super().__init__([{"params": g["params"]} for g in groups], defaults={})
        self.parts = [opt for _, opt in parts]
        self.kinds = [kind for kind, _ in parts]
        self._share()
        self.param_groups = groups

    def _share(self, groups: list[dict[str, Any]] | None = None) -> None:
        start = 0
        for opt in self.parts:
            if groups is not None:
                n = len(opt.param_groups)
                opt.param_groups = groups[start : start + n]
                start += n
            opt.state = self.state

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.parts:
            opt.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # replaces self.state and self.param_groups with new objects
        self._share(self.param_groups)


def _named_trainable(modules: list[nn.Module]) -> list[tuple[str, str, nn.Module, nn.Parameter]]:
    """(module path, parameter name, owning module, parameter), each parameter once."""
    seen: set[int] = set()
    out = []
    for i, root in enumerate(modules):
        for mod_name, mod in root.named_modules():
            for p_name, p in mod.named_parameters(recurse=False):
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                path = f"{i}.{mod_name}" if mod_name else str(i)
                out.append((path, p_name, mod, p))
    return out


def muon_partition(
    modules: list[nn.Module], variant: str = "torch"
) -> tuple[list[nn.Parameter], list[nn.Parameter], dict[str, str]]:
    """Split trainable parameters into (Muon, AdamW) by the rule of ``variant`` (``torch`` or
    ``singingvocoders``, see this module's docstring); the dict maps ``module.param`` names to ``muon``
    or ``adamw: why``."""
    if variant not in ("torch", "singingvocoders"):
        raise ValueError(f"unknown Muon variant {variant!r} (torch, singingvocoders)")
    entries = _named_trainable(modules)
    # by tensor, so that an output layer tied to an embedding is caught whichever module comes first
    embedding_ids = {id(m.weight) for root in modules for m in root.modules() if isinstance(m, nn.Embedding)}
    muon: list[Any] = []
    adamw: list[Any] = []
    why: dict[str, Any] = {}
    for path, p_name, _mod, p in entries:
        name = f"{path}.{p_name}"
        owner = re.sub(r"\.parametrizations\.\w+$", "", path)
        rows = p.shape[0] if p.dim() else 1
        if p.dim() < 2:
            reason = "adamw: 1-D (bias / norm)"
        elif id(p) in embedding_ids:
            reason = "adamw: embedding"
        elif p_name == "weight_g" or (p_name == "original0" and ".parametrizations." in f".{path}"):
            reason = "adamw: weight-norm magnitude"
        elif variant == "singingvocoders":
            reason = "muon"  # their rule stops here: heads and vectors stored as matrices go to Muon too
        elif _HEAD.search(owner):
            reason = "adamw: output head"
        elif rows < 2 or p.numel() // rows < 2:
            reason = "adamw: a vector stored as a matrix"
        else:
            reason = "muon"
        (muon if reason == "muon" else adamw).append(p)
        why[name] = reason
    return muon, adamw, why


def _kernel_kwargs(impl: str, params: list[nn.Parameter], device: torch.device) -> tuple[dict[str, Any], str]:
    devices = {p.device.type for p in params} or {device.type}
    on_cuda = devices == {"cuda"}
    if impl == "auto":
        impl = "fused" if on_cuda and all(p.is_floating_point() for p in params) else "foreach"
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "for_loop": {"foreach": False}}[impl], impl


def _make(cls: type[torch.optim.Optimizer], params: list[Any], kwargs: dict[str, Any], kernel: dict[str, Any]) -> Any:
    try:
        return cls(params, **kwargs, **kernel)
    except (RuntimeError, ValueError) as exc:
        from speechtrain.config import ConfigError

        raise ConfigError(
            f"optim.implementation: {cls.__name__} with {kernel} failed: {exc}; use optim.implementation=auto"
        ) from None


def decay_groups(
    params: list[nn.Parameter], weight_decay: float, no_decay: Collection[nn.Parameter]
) -> tuple[list[Any], int]:
    """``params`` as one group, or, with weight decay and some of them in ``no_decay``, as two: the rest
    (the optimizer's weight decay), then those (weight decay 0), each in ``params``' order. Returns the
    parameters or groups for the optimizer and how many tensors take no decay."""
    exempt = {id(p) for p in no_decay}
    if weight_decay == 0 or not any(id(p) in exempt for p in params):
        return list(params), 0
    keep = [p for p in params if id(p) not in exempt]
    free = [p for p in params if id(p) in exempt]
    return [{"params": keep}, {"params": free, "weight_decay": 0.0}], len(free)


def _decay_note(exempt: int) -> str:
    return f" ({exempt} without weight decay)" if exempt else ""


def build_optimizer(
    modules: list[nn.Module],
    optim_cfg: OptimConfig,
    device: str | torch.device,
    lr_multiplier: float = 1.0,
    no_decay: Collection[nn.Parameter] = (),
) -> tuple[torch.optim.Optimizer, AccelRecord]:
    """The optimizer over the trainable parameters of ``modules`` (each parameter once) and a
    record of what was built (name, update kernel, parameter counts).

    ``optim_cfg`` is a :class:`speechtrain.config.OptimConfig` (name, lr, betas, eps, weight_decay,
    implementation, muon_lr, muon_momentum). ``lr_multiplier`` scales every learning rate.
    ``sgd`` uses ``betas[0]`` as its momentum. ``no_decay``: parameters that take no weight decay (a second
    parameter group with weight decay 0, as Coqui's ``optimizer_wd_only_on_weights``; AdamW's part of Muon).
    """
    from speechtrain.errors import UserError

    dev = torch.device(device)
    name = optim_cfg.name
    entries = _named_trainable(modules)
    params = [p for *_, p in entries]
    if not params:
        raise UserError("build_optimizer: the modules have no trainable parameters (all frozen or empty)")
    lr = optim_cfg.lr * lr_multiplier
    n_total = sum(p.numel() for p in params)

    if name in ("adamw", "adam", "sgd"):
        kernel_kwargs, kernel = _kernel_kwargs(optim_cfg.implementation, params, dev)
        if name == "sgd":
            kwargs: dict[str, Any] = {"lr": lr, "momentum": optim_cfg.betas[0], "weight_decay": optim_cfg.weight_decay}
            cls: type[torch.optim.Optimizer] = torch.optim.SGD
        else:
            kwargs = {"lr": lr, "betas": tuple(optim_cfg.betas), "eps": optim_cfg.eps}
            kwargs["weight_decay"] = optim_cfg.weight_decay
            cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        groups, exempt = decay_groups(params, optim_cfg.weight_decay, no_decay)
        opt = _make(cls, groups, kwargs, kernel_kwargs)
        for g in opt.param_groups:
            g["kind"] = name
        record = AccelRecord(
            "optimizer",
            kernel in ("fused", "foreach"),
            True,
            f"{cls.__name__} ({kernel} kernel, {_why_kernel(optim_cfg.implementation, kernel, dev)}), "
            f"{len(params)} tensors{_decay_note(exempt)}, {_count(n_total)} parameters",
            {
                "name": name,
                "kernel": kernel,
                "tensors": len(params),
                "no_decay_tensors": exempt,
                "parameters": n_total,
                "lr": lr,
            },
        )
        return opt, record

    if name != "muon":
        from speechtrain.config import ConfigError

        raise ConfigError(f"optim.name: unknown optimizer '{name}' (adamw, adam, muon, sgd)")
    variant = optim_cfg.muon_variant
    muon_params, adamw_params, why = muon_partition(modules, variant)
    muon_lr = optim_cfg.muon_lr * lr_multiplier
    muon_wd = optim_cfg.muon_weight_decay
    muon_wd = optim_cfg.weight_decay if muon_wd is None else muon_wd
    common: dict[str, Any] = {"lr": muon_lr, "momentum": optim_cfg.muon_momentum, "weight_decay": muon_wd}
    parts: list[tuple[str, torch.optim.Optimizer]] = []
    matrices = [p for p in muon_params if p.dim() == 2]
    convs = [p for p in muon_params if p.dim() > 2]
    native = getattr(torch.optim, "Muon", None)
    if variant == "singingvocoders":
        if muon_params:
            parts.append(("muon", SingingVocodersMuon(muon_params, **common)))
        matrices, convs = [], list(muon_params)
    elif matrices and native is not None:
        parts.append(("muon", native(matrices, **common)))
    elif matrices:
        convs = matrices + convs
    if convs and variant != "singingvocoders":
        parts.append(("muon", FlatMuon(convs, **common)))
    kernel, exempt = "none", 0
    if adamw_params:
        kernel_kwargs, kernel = _kernel_kwargs(optim_cfg.implementation, adamw_params, dev)
        adamw_kwargs = {"lr": lr, "betas": tuple(optim_cfg.betas), "eps": optim_cfg.eps}
        adamw_kwargs["weight_decay"] = optim_cfg.weight_decay
        adamw_groups, exempt = decay_groups(adamw_params, optim_cfg.weight_decay, no_decay)
        parts.append(("adamw", _make(torch.optim.AdamW, adamw_groups, adamw_kwargs, kernel_kwargs)))
    opt = CombinedOptimizer(parts)
    n_muon = sum(p.numel() for p in muon_params)
    reasons: dict[str, int] = {}
    for r in why.values():
        reasons[r] = reasons.get(r, 0) + 1
    record = AccelRecord(
        "optimizer",
        bool(muon_params),
        True,
        f"Muon ({variant}) on {len(muon_params)} matrices ({_count(n_muon)} parameters, lr {muon_lr:g}, "
        f"weight decay {muon_wd:g}; {len(convs)} conv weights flattened) + AdamW ({kernel} kernel) on "
        f"{len(adamw_params)} tensors{_decay_note(exempt)} (lr {lr:g})",
        {
            "name": "muon",
            "variant": variant,
            "kernel": kernel,
            "muon_tensors": len(muon_params),
            "muon_parameters": n_muon,
            "adamw_tensors": len(adamw_params),
            "no_decay_tensors": exempt,
            "parameters": n_total,
            "torch_muon": bool(matrices) and native is not None,
            "partition": reasons,
        },
    )
    return opt, record


def _count(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n:,}"


def _why_kernel(requested: str, kernel: str, device: torch.device) -> str:
    if requested != "auto":
        return "requested"
    if kernel == "fused":
        return "auto: CUDA parameters"
    return f"auto: {device.type} parameters" if device.type != "cuda" else "auto: parameters not all on CUDA"


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if info.has_gpu:
        return "fused", "CUDA: fused AdamW updates every parameter in one kernel"
    return "foreach", "CPU: the foreach kernel groups parameter updates"


ACCELERATION = Acceleration(
    key="optim.implementation",
    record="optimizer",
    exact=True,
    order=80,
    apply=None,  # built with the loop's parts (train.optimizers.build_optimizers), which write this record
    probe=_rule,
    # torch's own default for a plain AdamW: foreach on CUDA, a for-loop on the CPU
    off=lambda device_type: "foreach" if device_type == "cuda" else "for_loop",
    rung=Rung(
        "fused_optimizer",
        "+ fused AdamW",
        {"optim.implementation": "fused"},
        ("optimizer",),
        # the optimizer record is "applied" for foreach too; this rung is about the fused kernel
        took_effect=lambda record: (record.get("info") or {}).get("kernel") == "fused",
    ),
    card=Card(
        title="Optimizer kernel",
        what="`build_optimizer(modules, optim_cfg, device)` builds AdamW/Adam/SGD with the fused kernel (one kernel "
        "for all parameters) or the foreach kernel (grouped per-tensor ops) or a plain loop; the record says which "
        '(`info["kernel"]`).',
        helps="the optimizer step of models with many small tensors.",
        costs="nothing.",
        auto="fused when all parameters are on CUDA, foreach elsewhere. An explicit kernel that torch rejects is a "
        "config error naming the fix.",
        own_loop="`opt, record = build_optimizer([model], cfg.optim, device)`.",
    ),
)
