"""Single-process checks of the multi-process pieces: torchrun environment, device per local rank,
the one-process identities of the collectives, peer-failure detection, the OOM guard's agreement."""

from __future__ import annotations

import os

import pytest
import torch

from speechtrain.data.batch import Batch
from speechtrain.device import resolve_device
from speechtrain.errors import UserError
from speechtrain.train import distributed as D
from speechtrain.train.oom_guard import OOMGuard, StageVote


def test_torchrun_env_device_and_group(monkeypatch) -> None:
    for key in D.TORCHRUN_ENV:
        monkeypatch.delenv(key, raising=False)
    assert D.init_from_env(torch.device("cpu")) is False  # one process: no group
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="torchrun"):
        D.init_from_env(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)  # an explicit index is kept
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(UserError, match="nproc-per-node"):
        resolve_device("auto")


def test_collectives_are_identities_for_one_process() -> None:
    cpu = torch.device("cpu")
    assert D.all_sum([1.5, 2, 3.25], cpu, 1) == [1.5, 2.0, 3.25]
    terms = {"loss": torch.tensor(2.0)}
    assert D.mean_over_ranks(terms, 1) is terms
    assert D.any_rank(True, cpu, 1) and not D.any_rank(False, cpu, 1)
    assert D.gather({"a": 1}, 1) == [{"a": 1}]
    assert D.world() == (0, 1)


def test_peer_failure_is_recognised() -> None:
    assert D.is_peer_failure(RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"))
    assert D.is_peer_failure(RuntimeError("NCCL communicator was aborted"))
    assert not D.is_peer_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not D.is_peer_failure(ValueError("gloo"))
    err = D.peer_failure_error(RuntimeError("Connection reset by peer\nmore"), 0, 7, "runs/x")
    assert "step 7" in str(err) and "speechtrain train --resume runs/x" in str(err)


def _batch(n: int) -> Batch:
    return Batch({"mel": torch.zeros(n, 2, 4), "mel_lengths": torch.full((n,), 4)}, [f"u{i}" for i in range(n)], 1, 1)


def test_oom_guard_redoes_the_stage_when_another_rank_failed() -> None:
    """A rank that got through its last forward learns at ``agree`` that a peer ran out of memory:
    it resets and redoes the stage with its own caps unchanged, agreeing once per attempt."""
    flags = iter([StageVote(failed=True), StageVote(trained=True)])  # the first agreement says: a peer failed
    calls: list[tuple[int, bool]] = []
    resets = []

    def run_piece(i, piece, split, agree) -> None:
        calls.append((i, agree is not None))
        if agree is not None:
            agree()

    guard = OOMGuard()
    guard.run_stage(
        [_batch(2), _batch(3)],
        run_piece,
        lambda: resets.append(1),
        stage="s",
        step=1,
        vote=lambda mine: next(flags),
    )
    assert calls == [(0, False), (1, True)] * 2  # agree is offered to the last piece only
    assert resets == [1] and guard.caps == {} and guard.recoveries == 0


def test_oom_after_the_agreement_is_a_clear_error() -> None:
    def run_piece(i, piece, split, agree) -> None:
        if agree is not None:
            agree()  # every rank agreed: the syncing backward started, and then ran out of memory
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")

    with pytest.raises(UserError, match="cannot be redone"):
        OOMGuard().run_stage([_batch(2)], run_piece, lambda: None, stage="gen", step=3, vote=lambda v: v)


GIB = 2**30


def test_auto_strategy_keeps_ddp_while_a_replica_fits_and_shards_when_it_does_not() -> None:
    fits = D.choose_strategy("auto", 2, 3 * GIB, 8 * GIB, [])
    assert fits.strategy == "ddp" and "within 50% of the 8.00 GiB" in fits.reason
    big = D.choose_strategy("auto", 4, 6 * GIB, 8 * GIB, [])
    assert big.strategy == "fsdp" and "over 50%" in big.reason and "1.50 GiB per rank" in big.reason
    gan = D.choose_strategy("auto", 2, 6 * GIB, 8 * GIB, ["a task of one optimizer stage (this one has 2)"])
    assert gan.strategy == "ddp" and "FSDP needs a task of one optimizer stage (this one has 2)" in gan.reason
    unknown = D.choose_strategy("auto", 2, 6 * GIB, None, [])
    assert unknown.strategy == "ddp" and "unknown" in unknown.reason
    assert D.choose_strategy("auto", 1, 6 * GIB, 8 * GIB, []).strategy == "single process"
    assert D.choose_strategy("ddp", 2, 6 * GIB, 8 * GIB, []).strategy == "ddp"
    assert D.choose_strategy("fsdp", 2, 0, None, []).to_dict() == {
        "strategy": "fsdp",
        "requested": "fsdp",
        "reason": "train.strategy=fsdp",
    }
    with pytest.raises(UserError, match="train.strategy=fsdp needs optim.name adamw"):
        D.choose_strategy("fsdp", 2, 0, None, ["optim.name adamw, adam or sgd (not muon)"])


def test_the_trainer_counts_its_replica_for_auto(monkeypatch) -> None:
    """What the Trainer hands to choose_strategy: the estimate's static bytes and its problems (a GAN's two
    stages), with a rank's share of the host RAM on the CPU."""
    from speechtrain.memory.estimate import static_memory
    from tests.test_train_engine import cfg_for, trainer_for

    seen: list = []

    def spy(requested, world_size, static, device_bytes, problems):
        seen.append((requested, static, device_bytes, problems))
        return D.StrategyChoice("single process", requested, "one process")

    from speechtrain.train import wrapping

    cfg = cfg_for("model.name=toy_gan", "optim.name=adamw")
    tr = trainer_for(cfg)
    monkeypatch.setattr(wrapping, "choose_strategy", spy)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    # counted as one of 2 ranks (without a process group)
    wrapping.choose_stage_strategy(tr.modules, tr.specs, cfg.train, cfg.optim, tr.precision, tr.device, 2)
    requested, static, device_bytes, problems = seen[0]
    assert requested == "auto" and problems == ["a task of one optimizer stage (this one has 2)"]
    assert static == static_memory(tr.modules, tr.specs, "adamw").static_bytes > 0
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert device_bytes == ram // 2
