"""Single-process checks of the multi-process pieces: torchrun environment, device per local rank,
the one-process identities of the collectives, peer-failure detection, the OOM guard's agreement."""

from __future__ import annotations

import pytest
import torch

from speechtrain.data.batch import Batch
from speechtrain.device import resolve_device
from speechtrain.errors import UserError
from speechtrain.train import distributed as D
from speechtrain.train.oom_guard import OOMGuard


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
    flags = iter([True, False])  # the first agreement says: a peer failed
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
        any_rank=lambda failed: next(flags),
    )
    assert calls == [(0, False), (1, True)] * 2  # agree is offered to the last piece only
    assert resets == [1] and guard.caps == {} and guard.recoveries == 0


def test_oom_after_the_agreement_is_a_clear_error() -> None:
    def run_piece(i, piece, split, agree) -> None:
        if agree is not None:
            agree()  # every rank agreed: the syncing backward started, and then ran out of memory
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")

    with pytest.raises(UserError, match="cannot be redone"):
        OOMGuard().run_stage([_batch(2)], run_piece, lambda: None, stage="gen", step=3, any_rank=lambda f: f)
