"""Count aten ops per optimizer step of a training process (where a peer row's time goes, without timing):

    python bench/peers/count_ops.py OUT.json -m speechtrain.recipes.bench SPEC.json ROW.json     # our row
    PEER_PYTHON bench/peers/count_ops.py OUT.json bench/peers/singing_nsf.py SPEC.json ROW.json  # the peer's row

(SPEC.json: a row's spec as ``run.py`` writes it into its work folder, e.g. with ``steps`` 3 and ``warmup`` 0;
the peer's row with ``PYTHONPATH=bench/peers/shims:.`` as ``run.py`` prints it.)

A TorchDispatchMode in the main process counts every aten op and the elements it writes; a global optimizer
step post-hook closes a "phase" at each optimizer.step (GAN: phase 2k = up to the D step, 2k+1 = up to the G
step). Convolutions are recorded with their shapes, groups, transposed flag and (backward) output_mask, and
their FLOPs; ``minflt`` is the process's minor page faults so far at the end of each phase. OUT.json is
rewritten after every phase.
"""

import json
import math
import os
import runpy
import sys
from collections import Counter

import torch
import torch.optim.optimizer as _optmod
from torch.utils._python_dispatch import TorchDispatchMode

OUT = sys.argv[1]
MAIN = os.getpid()
aten = torch.ops.aten
phases: list[dict] = []
cur = {"ops": Counter(), "conv": Counter(), "f64": Counter(), "flops": Counter(), "numel": Counter()}


def shp(t):
    return list(t.shape) if isinstance(t, torch.Tensor) else None


def conv_flops(x_shape, w_shape, out_shape, transposed):
    # 2 * MACs: each output element of the conv (or each input element for transposed) x Cin/g x kernel
    kernel = math.prod(w_shape[2:])
    if transposed:
        # w: (Cin, Cout/g, k): every input element multiplies Cout/g * k weights
        return 2 * math.prod(x_shape) * w_shape[1] * kernel
    return 2 * math.prod(out_shape) * w_shape[1] * kernel


class Count(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if os.getpid() != MAIN:
            return out
        name = str(func.overloadpacket.__name__) + "." + func._overloadname
        cur["ops"][name] += 1
        outs = out if isinstance(out, (list, tuple)) else [out]
        cur["numel"][name] += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
        if name in ("_foreach_copy_.default",):
            cur["numel"][name] += sum(t.numel() for t in args[0])
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and a.dtype == torch.float64:
                cur["f64"][name] += 1
                break
        if func is aten.convolution.default:
            x, w = args[0], args[1]
            transposed = bool(args[6])
            geometry = f"s{list(args[3])} p{list(args[4])} d{list(args[5])} T{int(transposed)} g{args[8]}"
            key = f"fwd x{shp(x)} w{shp(w)} {geometry}"
            cur["conv"][key] += 1
            cur["flops"]["conv_fwd"] += conv_flops(shp(x), shp(w), shp(out), transposed)
        elif func is aten.convolution_backward.default:
            go, x, w = args[0], args[1], args[2]
            transposed = bool(args[7])
            mask = list(args[10])
            key = (
                f"bwd go{shp(go)} x{shp(x)} w{shp(w)} s{list(args[4])} p{list(args[5])} d{list(args[6])} "
                f"T{int(transposed)} g{args[9]} mask{[int(m) for m in mask]}"
            )
            cur["conv"][key] += 1
            f = conv_flops(shp(x), shp(w), shp(go), transposed)
            if mask[0]:
                cur["flops"]["conv_bwd_input"] += f
            if mask[1]:
                cur["flops"]["conv_bwd_weight"] += f
        return out


def close_phase(opt, *a, **k):
    if os.getpid() != MAIN:
        return
    global cur
    import resource

    phases.append(
        {
            "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
            "optimizer_params": sum(p.numel() for g in opt.param_groups for p in g["params"]),
            "ops": dict(cur["ops"]),
            "conv": dict(cur["conv"]),
            "f64": dict(cur["f64"]),
            "flops": dict(cur["flops"]),
            "numel": dict(cur["numel"]),
        }
    )
    cur = {"ops": Counter(), "conv": Counter(), "f64": Counter(), "flops": Counter(), "numel": Counter()}
    tmp = OUT + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(phases, fh, indent=0)
    os.replace(tmp, OUT)


_optmod.register_optimizer_step_post_hook(close_phase)
mode = Count()
mode.__enter__()
rest = sys.argv[2:]
if rest[0] == "-m":
    sys.argv = [rest[1], *rest[2:]]
    runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")
