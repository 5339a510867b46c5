"""Issue 51: the Trainer is the loop alone and takes built parts; the recipe layer builds them (one builder for
every door); checkpoints of the one-class Trainer still resume; a user's own loop runs on the parts."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from speechtrain.recipes import build_task
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.metrics import read_metrics
from speechtrain.train.trainer import Trainer
from tests.test_train_engine import ListLoader, cfg_for, make_batch, make_trainer

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "prerefactor_toy_gan"


def test_the_trainer_module_is_the_loop_alone() -> None:
    assert len((ROOT / "speechtrain" / "train" / "trainer.py").read_text().splitlines()) <= 350


def test_the_trainer_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainer.__init__ keeps the parts it is given: with every builder (and any optimizer or module
    construction) refused, a Trainer over built parts is made and trains."""
    from speechtrain.recipes import loop
    from speechtrain.train import optimizers, schedule, wrapping

    cfg = cfg_for("model.name=toy_gan", "train.max_steps=2")
    tr = make_trainer(cfg, build_task(cfg), ListLoader([make_batch(0, [10, 8])]))
    parts = {
        "train": tr.train,
        "state": tr.state,
        "wrapping": tr.wrapping,
        "optimizers": tr.stage_optimizers,
        "runner": tr.runner,
        "checkpointer": tr.checkpointer,
        "evals": tr.evals,
        "log_rows": tr.log_rows,
        "compile_watch": tr.compile_watch,
        "train_loader": tr.train_loader,
    }

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("Trainer.__init__ built something")

    for module, name in [
        (wrapping, "wrap_stages"),
        (optimizers, "build_optimizers"),
        (schedule, "build_stage_optimizers"),
        (loop, "build_parts"),
    ]:
        monkeypatch.setattr(module, name, refused)
    monkeypatch.setattr(torch.optim.Optimizer, "__init__", refused)
    monkeypatch.setattr(torch.nn.Module, "__init__", refused)
    again = Trainer(**parts)
    assert again.runner is tr.runner and again.checkpointer is tr.checkpointer and again.state is tr.state
    assert again.optimizers is tr.optimizers and again.modules is tr.modules
    monkeypatch.undo()
    assert again.fit()["steps"] == 2


def _trainer_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Trainer"
    ]


def test_one_builder_makes_every_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """No module of the library but recipes/loop.py constructs a Trainer, and the training recipe's
    build_trainer (what train, tune, bench and the UI's jobs call) goes through build_parts."""
    from speechtrain.recipes import loop

    calls = {str(p.relative_to(ROOT)): _trainer_calls(p) for p in (ROOT / "speechtrain").rglob("*.py")}
    assert [p for p, lines in calls.items() if lines] == ["speechtrain/recipes/loop.py"]
    built: list[object] = []
    real = loop.build_parts

    def counting(*args: object, **kwargs: object) -> loop.LoopParts:
        built.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "build_parts", counting)
    cfg = cfg_for()
    task = build_task(cfg)
    tr = make_trainer(cfg, task)
    assert built == [task] and tr.task is task


def test_a_checkpoint_of_the_one_class_trainer_resumes_exactly(tmp_path: Path) -> None:
    """``tests/fixtures/prerefactor_toy_gan``: step 3 of a toy GAN saved by the Trainer before it was split into
    parts (commit a4ef6cb, tests/fixtures/make_prerefactor_checkpoint.py), and the losses that code trained
    after it. The parts load it (the same state layout) and train the same losses."""
    from tests.fixtures.make_prerefactor_checkpoint import OVERRIDES, batches

    old = ckpt.safe_load(FIXTURE / "step_00000003.pt")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_00000003.pt").write_bytes((FIXTURE / "step_00000003.pt").read_bytes())
    cfg = cfg_for(*OVERRIDES, "train.max_steps=5")
    torch.manual_seed(0)
    tr = make_trainer(cfg, build_task(cfg), ListLoader(batches()), run_dir=run)
    # the layout kept, plus the one key added since (the training seconds a resume continues from; absent: 0)
    assert sorted(tr.state_dict()) == sorted([*(k for k in old if k != ckpt.CHECKSUM_KEY), "train_seconds"])
    assert tr.resume() and tr.step == 3
    tr.fit()
    got = [{k: v for k, v in r.items() if "loss" in k} for r in read_metrics(run) if r["step"] > 3]
    want = json.loads((FIXTURE / "continued.json").read_text())
    assert [sorted(g) for g in got] == [sorted(w) for w in want]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-5)  # bit-equal on the machine that wrote it; other CPUs sum otherwise


def test_the_own_loop_example_trains_and_resumes_with_the_parts(tmp_path: Path) -> None:
    """examples/own_loop.py: a user's task in a user's loop over speechtrain's step runner and checkpointer;
    a second call continues from the checkpoint as if it had never stopped."""
    from examples.own_loop import train

    whole = train(tmp_path / "whole", 10)
    assert len(whole) == 2 and all(v == v for v in whole)  # finite losses at steps 5 and 10
    train(tmp_path / "split", 5)
    assert train(tmp_path / "split", 10) == whole[1:]  # step 10 after a resume at step 5: the same loss
    kept = sorted(p.name for p in (tmp_path / "split" / "checkpoints").iterdir())
    assert kept == ["step_00000005.pt", "step_00000010.pt"]
