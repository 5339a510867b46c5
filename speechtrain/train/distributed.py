"""The process group as the Trainer sees it: rank and world size, set-up from ``torchrun``, gradient sync.

- :func:`init_from_env` starts the process group from the variables ``torchrun`` sets (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``): NCCL on GPUs (one device per local
  rank), gloo on CPUs. Single node and multi-node alike (``torchrun --nnodes N --rdzv-endpoint ...``).
- :func:`choose_strategy`: what ``train.strategy`` becomes (auto: DDP while one replica's weights,
  gradients and optimizer state fit in half a rank's device memory, else FSDP2 when the task qualifies).
- :func:`shard_modules` (FSDP2 per transformer block, with :func:`fsdp_mixed_precision`) and
  :func:`save_sharded` / :func:`load_sharded`: sharded checkpoints with ``torch.distributed.checkpoint``,
  each rank writing its own shards, loadable by any number of ranks or by one process without a group
  (the files' layout and safety: :mod:`speechtrain.train.checkpoint`).
- :class:`StageSync`: the gradient sync of one optimizer stage, torch's
  :class:`~torch.nn.parallel.DistributedDataParallel` over that stage's parameters (one per GAN stage):
  gradients are all-reduced in buckets while the backward still runs. Only the last piece of a step
  (last micro-batch, or last OOM-split piece) syncs; the others run under ``no_sync()``.

Why DDP wraps a stage's *parameters* and runs the task's ``training_step`` as its forward, rather than
wrapping each model: a task calls its own modules (several per stage, sometimes methods other than
``forward``), and a GAN makes the generator's output in ``disc`` but back-propagates it in ``gen``. DDP
arms its gradient hooks in the forward that precedes the synced backward; with the stage as the
forward that is always the right backward, whatever the task calls inside.

The library still issues a few collectives of its own, each small and each needed for agreement:

- :func:`all_sum` of the step's total batch weight (items / frames) and counters, once per step: each
  rank scales its loss by its share of the *global* weight, so 2 ranks x B give the gradient of one
  process accumulating 2 x B even when the ranks' batches weigh differently (DDP itself averages);
- :func:`mean_over_ranks` of a stage's loss terms, once per stage: the logged losses are the global
  ones, and the finite-loss check (skip the step) is the same decision on every rank;
- :func:`any_ranks` for the OOM guard's vote (every rank redoes a stage together; a rank with nothing to
  train joins the gradient sync with zero gradients, :meth:`StageSync.contribute_nothing`), :func:`any_rank`
  for stop signals and rank 0's "best checkpoint" decision (rank 0 alone evaluates);
- :func:`gather` of every rank's RNG state when a checkpoint is saved (a resumed run continues each
  rank's random stream, not rank 0's on every rank).
"""

from __future__ import annotations

import atexit
import datetime
import gc
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from speechtrain.errors import UserError
from speechtrain.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

#: the environment variables torchrun sets for every worker
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world() -> tuple[int, int]:
    """(rank, world size) of the process group; (0, 1) without one."""
    if initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def env_world_size() -> int:
    """``WORLD_SIZE`` as torchrun set it (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def env_rank() -> int:
    """``RANK`` as torchrun set it (0 outside torchrun): which worker this is, with or without a group."""
    return int(os.environ.get("RANK", "0") or 0)


def _import_group_defaults() -> None:
    """Import ``torch.distributed.nn`` before any process group exists (this module does it when it is
    imported: before :func:`init_from_env`, and before a group of the caller's when speechtrain is
    imported first).

    Its collectives take ``group=group.WORLD`` as a default argument, evaluated when the module is first
    imported, and torch imports it lazily (``torch.use_deterministic_algorithms`` does, for one). Imported
    while a group exists, those defaults hold that group: ``destroy_process_group`` then cannot free it,
    its gloo worker threads outlive ``main``, and one of them, releasing a finished all-gather while the
    interpreter shuts down, aborts the process ("terminate called without an active exception", exit
    -6) after a successful run. Imported before, the defaults are None (the default group at call time).
    """
    if torch.distributed.is_available():
        importlib.import_module("torch.distributed.nn")


_import_group_defaults()


def _free_groups_at_exit() -> None:
    """At interpreter exit (``atexit``: the interpreter still runs), collect what still holds a process group.

    A training loop's DDP wrappers hold their group, often inside reference cycles (a reducer's hooks, a
    Trainer's stages) that only a cyclic collection frees. A loop that destroys the group while they live (a
    user's own ``dist.destroy_process_group()`` with the Trainer still in scope) leaves them to the final
    collection of ``Py_FinalizeEx``, where the gloo group's worker thread, releasing a finished all-reduce
    whose tensors need the GIL, aborts the process ("terminate called without an active exception", exit -6
    after a run that stopped cleanly: 4 of 6 runs of the two-rank SIGTERM test before this). Collected here,
    the group is freed while its threads can still finish. (``destroy_process_group`` clears every record that a
    group was ever made, so this runs in every process: one collection, silent.)"""
    if not torch.distributed.is_available() or torch.distributed.is_initialized():
        return
    gc.collect()
    release_meshes()


atexit.register(_free_groups_at_exit)


def init_from_env(device: torch.device | None = None, timeout_minutes: float = 30.0) -> bool:
    """Start the process group torchrun describes (a no-op for one process or an existing group).

    NCCL when ``device`` is a GPU (which must be this local rank's, see
    :func:`speechtrain.device.resolve_device`; None: ``cuda:LOCAL_RANK`` when there is a GPU), gloo
    otherwise. True when this call started the group
    (the caller then ends it with :func:`shutdown`).
    """
    if initialized() or env_world_size() <= 1:
        return False
    missing = [k for k in TORCHRUN_ENV if k not in os.environ]
    if missing:
        raise UserError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} are not set: start multi-process "
            "training with torchrun (torchrun --nproc-per-node N -m speechtrain train ...)"
        )
    if not torch.distributed.is_available():
        raise UserError("this torch build has no torch.distributed; install a build with distributed support")
    if device is None:  # this local rank's GPU, else the CPU
        local = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(minutes=timeout_minutes)}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    torch.distributed.init_process_group(backend, **kwargs)
    rank, size = world()
    log.info(f"process group: {backend}, world size {size} (this is rank {rank}, device {device})")
    return True


def shutdown(started: bool) -> None:
    """End the process group if :func:`init_from_env` started it, and let it go (see :func:`release_meshes`)."""
    if started and initialized():
        gc.collect()  # the finished run's modules and optimizers, which reference the group, go first
        torch.distributed.destroy_process_group()
        release_meshes()


def release_meshes() -> None:
    """Drop the process groups that device meshes still hold once the group is destroyed.

    FSDP2 (``fully_shard``) makes DTensor parameters over a ``DeviceMesh``, and a mesh keeps its process groups
    (``_pg_registry``). DTensor's sharding-propagation cache keeps the meshes of the ops it has seen for the
    life of the process, so ``destroy_process_group`` cannot free the gloo group: its worker threads then
    outlive ``main``, and the group is destroyed during the interpreter's shutdown, which aborts the process
    now and then ("terminate called without an active exception", exit -6 after a finished FSDP run: 7 of 21
    runs of a resume loop on 2 gloo ranks before this, 0 of 41 after). A destroyed group is of no use to anyone,
    so the meshes let go of it here and the group is freed while the interpreter still runs (as
    :func:`_import_group_defaults` does for ``torch.distributed.nn``). Only when meshes were made
    (``torch.distributed.device_mesh`` imported)."""
    if "torch.distributed.device_mesh" not in sys.modules:
        return
    from torch.distributed.device_mesh import DeviceMesh

    for obj in gc.get_objects():
        # by the type's MRO, not isinstance: isinstance runs torch's opaque-type metaclass check on every
        # object (deprecation warnings from torch.distributed's attributes, a ReferenceError on dead proxies)
        if DeviceMesh in type(obj).__mro__:
            groups = getattr(obj, "_pg_registry", None)
            if isinstance(groups, dict):
                groups.clear()
    gc.collect()


def is_peer_failure(exc: BaseException) -> bool:
    """An error of a collective: a peer died (gloo: connection reset) or stopped answering (NCCL: timeout)."""
    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        key in text for key in ("gloo", "NCCL", "Connection reset", "Connection closed", "ProcessGroup")
    )


def peer_failure_error(exc: BaseException, rank: int, step: int, run_dir: Any) -> UserError:
    """The message a rank leaves when another rank went away in the middle of a step."""
    where = f"; the last checkpoint is in {run_dir}/checkpoints: continue with speechtrain train --resume {run_dir}"
    return UserError(
        f"rank {rank}: another rank stopped answering during step {step} (killed, out of host memory, or a "
        f"network failure){where if run_dir else ''}. ({str(exc).splitlines()[0][:300]})"
    )


def barrier() -> None:
    """Wait for every rank (a no-op without a process group)."""
    if initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()


def any_rank(flag: bool, device: torch.device, world_size: int) -> bool:
    """True if ``flag`` is set on any rank (one all-reduce under a process group)."""
    if world_size == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())  # host sync: ranks must agree before going on


def any_ranks(flags: Sequence[bool], device: torch.device, world_size: int) -> list[bool]:
    """Each of ``flags`` set on any rank (one all-reduce for all of them; themselves for one process)."""
    if world_size == 1:
        return [bool(f) for f in flags]
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]  # host sync: ranks must agree before going on


def all_sum(values: Sequence[float], device: torch.device, world_size: int) -> list[float]:
    """Host numbers summed over the ranks (one all-reduce in float64; themselves for one process)."""
    if world_size == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return [float(v) for v in t.tolist()]  # host sync: the step's weights are needed before the backward


def gather(obj: Any, world_size: int) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank (``[obj]`` for one process)."""
    if world_size == 1:
        return [obj]
    out: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(out, obj)
    return out


def mean_over_ranks(terms: dict[str, torch.Tensor], world_size: int) -> dict[str, torch.Tensor]:
    """Scalar loss terms averaged over the ranks (one all-reduce of the stacked terms)."""
    if world_size == 1 or not terms:
        return terms
    keys = list(terms)
    stacked = torch.stack([terms[k].detach().float().reshape(()) for k in keys])
    torch.distributed.all_reduce(stacked)
    stacked /= world_size
    return {k: stacked[i] for i, k in enumerate(keys)}


class _StageForward(nn.Module):
    """The parameters of a stage, as the module DDP wraps; its forward runs the stage's step function."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        super().__init__()
        self.params = nn.ParameterList(params)

    def forward(self, fn: Callable[[], Any]) -> Any:
        return fn()


class StageSync:
    """DistributedDataParallel over the trainable parameters of one optimizer stage.

    ``run(fn, sync)`` runs ``fn`` (forward of a piece: the task's ``training_step``) as DDP's forward;
    with ``sync`` the backward that follows all-reduces the accumulated gradients bucket by bucket,
    overlapped with the backward, and averages them; without it (``no_sync``) gradients accumulate locally.

    ``find_unused_parameters`` (``train.ddp_find_unused_parameters``; auto: on only for a task that declares
    ``ddp_find_unused_parameters = True``, none of the built-in families does) makes DDP walk the autograd graph
    after every synced forward to find parameters without a gradient (a branch a stage skips): needed then,
    a cost and a warning from torch otherwise. ``static_graph`` and ``gradient_as_bucket_view`` are DDP's own
    options (``train.ddp_static_graph``, ``train.ddp_gradient_as_bucket_view``: the gradients are views into
    the all-reduce buckets, one copy of the gradients less).

    Without ``find_unused_parameters`` DDP rebuilds its buckets once, in the forward after the first synced
    backward, with a broadcast. The OOM guard agrees between ranks *inside* the forward (see
    :class:`~speechtrain.train.oom_guard.OOMGuard`): a rank redoing a piece must not meet a broadcast on the
    other; :meth:`settle` therefore makes that rebuild happen at a point every rank reaches together (the end
    of the stage's first step), and DDP's forward holds no collective after it.
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        device: torch.device,
        bucket_mb: float = 25.0,
        *,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = True,
    ) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.module = _StageForward(params)
        self.ddp = DistributedDataParallel(
            self.module,
            device_ids=[device] if device.type == "cuda" else None,
            bucket_cap_mb=bucket_mb,
            find_unused_parameters=find_unused_parameters,
            static_graph=static_graph,
            gradient_as_bucket_view=gradient_as_bucket_view,
        )
        self._settled = False
        if static_graph:
            self._record_graph(params)

    def _record_graph(self, params: list[nn.Parameter]) -> None:
        """DDP's static graph records the graph in its first iteration, which must be a synced one (a first
        backward under ``no_sync``, a step's first micro-batch, or a piece of an OOM-split step, fails its
        reducer's assertion): one synced forward/backward using every parameter (zero gradients, zero update),
        here, where every rank is."""
        out = self.ddp(lambda: sum((p.reshape(-1)[:1] * 0).sum() for p in params))
        out.backward()
        for p in params:
            p.grad = None

    def run(self, fn: Callable[[], T], sync: bool) -> T:
        if sync:
            return self.ddp(fn)
        with self.ddp.no_sync():
            return self.ddp(fn)

    def contribute_nothing(self) -> None:
        """The synced backward of a rank with nothing to train this step (every utterance of its micro-batches
        left out by the OOM guard) while the other ranks train: a zero loss over every parameter, run through
        DDP like a step's last piece, so that this rank's all-reduce of (zero) gradients meets the others' with
        the same buckets in the same order. DDP divides by the world size and the others scaled their losses
        by their share of the global weight (this rank's part being none): the averaged gradient is the one of
        what was trained, on every rank."""
        params = list(self.module.params)
        out = self.ddp(lambda: sum((p.reshape(-1)[:1] * 0).sum() for p in params))
        out.backward()

    def settle(self) -> None:
        """After the stage's first synced backward (every rank calls it at the same point): DDP's one bucket
        rebuild, which it would otherwise do with a broadcast inside the next forward."""
        if self._settled:
            return
        self._settled = True
        with torch.enable_grad():
            # torch's own call from DistributedDataParallel._pre_forward, made here (a no-op, without any
            # collective, when DDP needs no rebuild: find_unused_parameters, or already rebuilt)
            if self.ddp.reducer._rebuild_buckets():
                self.ddp._has_rebuilt_buckets = True


def unused_parameters_error(exc: BaseException) -> UserError | None:
    """The fix for DDP's error about parameters that received no gradient (None for any other error)."""
    text = str(exc)
    if "Expected to have finished reduction in the prior iteration" not in text and "did not receive grad" not in text:
        return None
    found = re.search(r"Parameter indices which did not receive grad for rank \d+: [\d ]+", text)
    return UserError(
        "a stage of this task leaves some of its parameters without a gradient, which DDP (train.strategy=ddp) "
        "then waits for: set train.ddp_find_unused_parameters=true (or give the task the class attribute "
        f"ddp_find_unused_parameters = True).{' (' + found.group(0).strip() + ')' if found else ''}"
    )


class ShardedStage:
    """FSDP2 (``fully_shard``) gradient sync of one stage: the modules are sharded in place, their
    forward all-gathers the parameters and their backward reduce-scatters the gradients; ``run(fn,
    sync)`` switches the reduce-scatter off for every piece but the last (``set_requires_gradient_sync``)."""

    def __init__(self, roots: list[nn.Module]) -> None:
        self.roots = roots

    def run(self, fn: Callable[[], T], sync: bool) -> T:
        for m in self.roots:
            m.set_requires_gradient_sync(sync)  # type: ignore[operator]
        return fn()


def fsdp_mixed_precision(precision: str) -> tuple[Any, str]:
    """FSDP2's ``MixedPrecisionPolicy`` for the run's precision (``PrecisionPlan.name``) and its description:
    bf16: parameters all-gathered and computed in bf16, gradients reduce-scattered in fp32 (the sharded
    master weights and the optimizer stay fp32); fp32: none. fp16 never gets here (refused under fsdp)."""
    if precision != "bf16":
        return None, f"none ({precision})"
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32), "param bf16, reduce fp32"


#: the names of the ModuleLists whose items are transformer blocks (each its own FSDP2 unit): ours, and GPT-2's
#: ``h`` (XTTS keeps Coqui's names, so that its checkpoints load key for key)
BLOCK_LISTS = ("blocks", "h")


def shard_modules(
    modules: dict[str, nn.Module], mp_policy: Any = None, forward_methods: dict[str, tuple[str, ...]] | None = None
) -> list[str]:
    """``fully_shard`` every block of each ``blocks`` (or ``h``) ModuleList (one all-gather per transformer block),
    then each module, with ``mp_policy`` (see :func:`fsdp_mixed_precision`); the names of the sharded
    units, for the start-up record. ``modules``: the trained ones (a frozen module has no gradients or
    optimizer state to shard: it stays whole on every rank). ``forward_methods``: per module, the methods
    besides ``forward`` that read its weights (:class:`speechtrain.capabilities.ShardedForwards`); they gather
    the parameters as the forward does."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    units: list[str] = []
    for name, module in modules.items():
        for sub_name, sub in module.named_modules():
            for list_name in BLOCK_LISTS:
                blocks = getattr(sub, list_name, None)
                if isinstance(blocks, nn.ModuleList):
                    for i, block in enumerate(blocks):
                        fully_shard(block, **kwargs)
                        units.append(f"{name}.{sub_name + '.' if sub_name else ''}{list_name}.{i}")
        fully_shard(module, **kwargs)
        for method in (forward_methods or {}).get(name, ()):
            register_fsdp_forward_method(module, method)
        units.append(name)
    return units


def _with_state(modules: dict[str, nn.Module]) -> dict[str, nn.Module]:
    """The modules that hold something to save (a module of buffers kept out of its state dict has nothing:
    torch's state-dict helpers refuse an empty one)."""
    return {k: m for k, m in modules.items() if m.state_dict()}


def _stage_model(modules: dict[str, nn.Module], names: list[str]) -> nn.Module:
    """The modules of one optimizer stage as one model: the optimizer state is keyed ``<module>.<param>``."""
    return nn.ModuleDict({n: modules[n] for n in names})


def full_state(modules: dict[str, nn.Module], optimizers: dict[str, Any], stage_modules: dict[str, list[str]]) -> Any:
    """Full (unsharded, CPU) state dicts of sharded modules and their optimizers; every rank calls it."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    mods = {k: get_model_state_dict(m, options=options) for k, m in _with_state(modules).items()}
    opts = {
        k: get_optimizer_state_dict(_stage_model(modules, stage_modules[k]), o, options=options)
        for k, o in optimizers.items()
    }
    return mods, opts


def load_full_state(
    modules: dict[str, nn.Module],
    optimizers: dict[str, Any],
    stage_modules: dict[str, list[str]],
    module_states: dict[str, Any],
    optimizer_states: dict[str, Any],
) -> None:
    """Load full state dicts (saved by any number of ranks) into sharded modules and optimizers."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    for k, m in _with_state(modules).items():
        set_model_state_dict(m, module_states[k], options=options)
    for k, o in optimizers.items():
        set_optimizer_state_dict(_stage_model(modules, stage_modules[k]), o, optimizer_states[k], options=options)


# ---------------------------------------------------------------------------------------------- sharded checkpoints


def _split_tensors(tree: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the tensors of a nested dict, everything else), both keeping the dict structure."""
    tensors: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            tensors[k], rest[k] = _split_tensors(v)
        elif isinstance(v, torch.Tensor):
            tensors[k] = v
        else:
            rest[k] = v
    return tensors, rest


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def save_sharded(
    modules: dict[str, nn.Module], optimizers: dict[str, Any], stage_modules: dict[str, list[str]], folder: Path
) -> dict[str, Any]:
    """Every rank writes its own shards of the modules and optimizers (their tensors) to ``folder`` with
    ``torch.distributed.checkpoint``; a :class:`CheckpointError` on every rank if any rank's write failed.
    Returns what is not a tensor (the optimizers' parameter groups), for the step file; works without a
    process group too (plain modules, one writer)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    from speechtrain.train.checkpoint import dcp_without_group_quietly, first_line, write_failed

    state = {
        "modules": {k: get_model_state_dict(m) for k, m in _with_state(modules).items()},
        "optimizers": {
            k: get_optimizer_state_dict(_stage_model(modules, stage_modules[k]), o) for k, o in optimizers.items()
        },
    }
    tensors, rest = _split_tensors(state)
    try:
        with dcp_without_group_quietly():
            dcp.save(tensors, storage_writer=dcp.FileSystemWriter(str(folder)), no_dist=not initialized())
    except (Exception, dcp.CheckpointException) as exc:  # noqa: BLE001 - DCP gathers every rank's failure
        if is_peer_failure(exc) or any(k in str(exc) for k in ("Connection reset", "Connection closed", "Broken pipe")):
            rank = world()[0]
            raise UserError(
                f"rank {rank}: another rank stopped answering while the ranks wrote the shards of a checkpoint to "
                f"{folder.parent} (killed, out of host memory, or a network failure); the previous checkpoint is "
                f"intact: continue with `speechtrain train --resume {folder.parent.parent}`. "
                f"({first_line(exc)[:200]})"
            ) from None
        raise write_failed(folder, RuntimeError(first_line(exc)[:300])) from None
    return rest


def load_sharded(
    modules: dict[str, nn.Module],
    optimizers: dict[str, Any],
    stage_modules: dict[str, list[str]],
    folder: Path,
    rest: dict[str, Any],
) -> None:
    """Load what :func:`save_sharded` wrote (by any number of ranks) into these modules and optimizers:
    sharded (FSDP2, each rank reads its own part) or plain (one process, or DDP: every rank reads all).

    A fresh optimizer has no state yet: torch's ``get_optimizer_state_dict`` initialises it (one step
    with zero gradients and zero learning rate) so that DCP has tensors to fill; the entries of
    parameters that had no state when saved (a save before the first step) are left out again.
    Every rank of a process group calls it; without one it reads alone."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    from speechtrain.train.checkpoint import check_shards, dcp_without_group_quietly, first_line, shard_reader

    saved = set(check_shards(folder, folder).state_dict_metadata)
    model_states = {k: get_model_state_dict(m) for k, m in _with_state(modules).items()}
    optim_states: dict[str, Any] = {}
    for k, o in optimizers.items():
        osd: dict[str, Any] = dict(get_optimizer_state_dict(_stage_model(modules, stage_modules[k]), o))
        osd["state"] = {
            param: entry
            for param, entry in osd["state"].items()
            if all(
                f"optimizers.{k}.state.{param}.{name}" in saved
                for name, v in entry.items()
                if isinstance(v, torch.Tensor)
            )
        }
        optim_states[k] = osd
    tensors, _ = _split_tensors({"modules": model_states, "optimizers": optim_states})
    try:
        with dcp_without_group_quietly():
            dcp.load(tensors, storage_reader=shard_reader(folder), no_dist=not initialized())
    except (Exception, dcp.CheckpointException) as exc:  # noqa: BLE001 - DCP gathers every rank's failure
        raise UserError(
            f"{folder}: the sharded checkpoint does not match this model/optimizer config ({first_line(exc)[:300]}); "
            f"resume with the run's own config (speechtrain train --resume RUN_DIR)"
        ) from None
    _merge(model_states, rest.get("modules", {}))
    _merge(optim_states, rest.get("optimizers", {}))  # the parameter groups (learning rates, FQNs) as saved
    for k, m in _with_state(modules).items():
        set_model_state_dict(m, model_states[k])
    for k, o in optimizers.items():
        set_optimizer_state_dict(_stage_model(modules, stage_modules[k]), o, optim_states[k])


# ---------------------------------------------------------------------------------------------- strategy

#: ``train.strategy=auto`` keeps DDP while weights, gradients and optimizer state take at most this share of
#: a device's memory: the rest is the room for activations, backward temporaries and the allocator
ROOM_FOR_STATIC = 0.5


@dataclass(frozen=True)
class StrategyChoice:
    """What ``train.strategy`` became for this run, and why."""

    strategy: str  # "ddp", "fsdp" or "single process"
    requested: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"strategy": self.strategy, "requested": self.requested, "reason": self.reason}


def choose_strategy(
    requested: str,
    world_size: int,
    static_bytes: int,
    device_bytes: int | None,
    fsdp_problems: list[str],
    room: float = ROOM_FOR_STATIC,
) -> StrategyChoice:
    """``train.strategy`` for ``world_size`` processes. ``static_bytes``: weights + gradients + optimizer
    state of one full replica (as ``speechtrain estimate`` counts them); ``device_bytes``: one rank's device
    memory (None: unknown); ``fsdp_problems``: why this task cannot be sharded (empty: it can).

    auto: DDP while the replica's static memory fits in ``room`` of the device (the rest for activations),
    FSDP2 otherwise when the task qualifies (else DDP, with the reason); fsdp with problems: a UserError."""
    gib = 2**30
    if world_size == 1:
        return StrategyChoice("single process", requested, "one process")
    if requested == "ddp":
        return StrategyChoice("ddp", requested, "train.strategy=ddp")
    if requested == "fsdp":
        if fsdp_problems:
            raise UserError(
                "train.strategy=fsdp needs " + "; ".join(fsdp_problems) + ": use train.strategy=ddp otherwise"
            )
        return StrategyChoice("fsdp", requested, "train.strategy=fsdp")
    static = f"weights + gradients + optimizer state take {static_bytes / gib:.2f} GiB per replica"
    if device_bytes is None:
        return StrategyChoice("ddp", requested, f"auto: {static}; the device's memory is unknown: DDP")
    limit = room * device_bytes
    if static_bytes <= limit:
        return StrategyChoice(
            "ddp",
            requested,
            f"auto: {static}, within {room:.0%} of the {device_bytes / gib:.2f} GiB a rank has (the rest for "
            f"activations): DDP",
        )
    over = f"auto: {static}, over {room:.0%} of the {device_bytes / gib:.2f} GiB a rank has"
    if fsdp_problems:
        return StrategyChoice(
            "ddp", requested, f"{over}, but FSDP needs {'; '.join(fsdp_problems)}: DDP (it may run out of memory)"
        )
    return StrategyChoice(
        "fsdp", requested, f"{over}: FSDP2, {static_bytes / world_size / gib:.2f} GiB per rank once sharded"
    )
