"""DDP on the CPU with gloo: 2 processes x batch B train exactly as 1 process accumulating 2 x B
(per-step losses within 1e-5, final weights), for a one-stage task and a GAN; a resumed 2-rank run
equals the uninterrupted one; SIGTERM on one rank stops both at the same step; and `speechtrain train`
under torchrun initialises the group itself, shares the run directory and writes from rank 0 alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.ranks import spawn_ranks

pytestmark = pytest.mark.slow

STEPS = 3
MODELS = ("toy", "toy_gan")
LOSS_KEYS = ("loss", "disc_loss")
ROOT = Path(__file__).resolve().parents[1]


def _batches(step: int, n: int = 2) -> list:
    """``n`` micro-batches of a step, of different sizes and lengths (so that their weights differ)."""
    from tests.test_train_engine import make_batch

    shapes = [[16, 12, 15, 9], [8, 6, 11], [14, 10], [7, 13, 12, 5, 9]]
    return [make_batch(10 * step + i, shapes[i]) for i in range(n)]


def _trainer(model: str, *overrides: str):
    from tests.test_train_engine import cfg_for, trainer_for

    # SGD: Adam divides by sqrt(v), which magnifies float-order noise in near-zero gradients past 1e-5
    return trainer_for(
        cfg_for(f"model.name={model}", "optim.name=sgd", "optim.lr=0.1", "optim.grad_clip=1.0", *overrides)
    )


def _run(
    model: str, rank: int | None, accum: int = 1, *overrides: str, keep: list | None = None
) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    """Per-step losses and final weights: one process with every micro-batch (rank None), else rank's
    ``accum`` micro-batches (2 x ``accum`` micro-batches per step in all). ``keep`` receives the trainer."""
    from speechtrain.train.distributed import full_state
    from tests.test_train_engine import params

    tr = _trainer(model, *overrides)
    if keep is not None:
        keep.append(tr)
    losses = []
    for step in range(STEPS):
        micro = _batches(step, 2 * accum)
        out = tr.train_step(micro if rank is None else micro[rank * accum : (rank + 1) * accum])
        losses.append({k: float(out[k]) for k in LOSS_KEYS if k in out})
    if tr.sharded:  # the full weights (on rank 0; every rank takes part)
        mods, _ = full_state(tr.modules, tr.optimizers, tr.checkpointer.stage_modules())
        return losses, {f"{m}.{k}": v for m, sd in mods.items() for k, v in sd.items()}
    return losses, params(tr)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        results = {}
        for model in MODELS:
            for accum in (1, 2):  # accum 2: no_sync on the first micro-batch (GAN: generator graph kept across stages)
                tr_losses, weights = _run(model, rank, accum)
                results[model, accum] = {"losses": tr_losses, "params": weights}
        results["sigterm"] = _sigterm_on_rank_1(rank, Path(out_dir) / "sigterm_run")
        results["resume"] = _resume(rank, Path(out_dir))
        torch.save(results, Path(out_dir) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


class _SignalLoader:
    """Endless batches; on rank 1 the 3rd batch comes with ``sig`` sent to this process."""

    notes: list[str] = []
    mean_batch_size = 2.0
    epoch = 0

    def __init__(self, rank: int, sig: int = signal.SIGTERM) -> None:
        self.rank, self.pos, self.sig = rank, 0, sig

    def __iter__(self):
        from tests.test_train_engine import make_batch

        while True:
            self.pos += 1
            if self.rank == 1 and self.pos == 3:
                os.kill(os.getpid(), self.sig)
            yield make_batch(self.pos, [9, 8])

    def state_dict(self) -> dict:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.pos = state["pos"]


def _sigterm_on_rank_1(rank: int, run_dir: Path) -> dict:
    """fit() on both ranks; rank 1 alone receives SIGTERM: both stop at the same step, rank 0 saves it."""
    from speechtrain.recipes import build_task
    from tests.test_train_engine import cfg_for, make_trainer

    cfg = cfg_for("train.max_steps=50", "train.save_every=100")
    torch.manual_seed(0)
    tr = make_trainer(cfg, build_task(cfg), _SignalLoader(rank), None, run_dir)
    return tr.fit()


def _resume(rank: int, out: Path) -> dict:
    """4 steps straight, and 2 steps then a resume to 4, on 2 ranks whose random streams differ."""
    from speechtrain.recipes import build_task
    from tests.test_train_engine import ListLoader, NaNAfter, cfg_for, make_batch, make_trainer, params

    class Noisy(NaNAfter):  # the loss gets a draw of torch's RNG: a rank must resume its own stream
        def training_step(self, batch, stage, cache):
            out = self.task.training_step(batch, stage, cache)
            return {**out, "loss": out["loss"] + torch.rand(())}

    def run(run_dir: Path, max_steps: int, resume: bool) -> dict:
        cfg = cfg_for(f"train.max_steps={max_steps}", "train.save_every=2")
        torch.manual_seed(0)
        loader = ListLoader([make_batch(10 * rank + k, [9, 8, 7 + k]) for k in range(3)])
        tr = make_trainer(cfg, Noisy(build_task(cfg), 0, 0), loader, None, run_dir)
        torch.manual_seed(100 + rank)
        if resume:
            assert tr.resume()
        tr.fit()
        return params(tr)

    full = run(out / "full", 4, False)
    run(out / "cut", 2, False)
    return {"full": full, "resumed": run(out / "cut", 4, True)}


def test_two_ranks_equal_one_process_accumulating_two_resume_and_stop_together(tmp_path: Path, monkeypatch) -> None:
    codes = spawn_ranks(_worker, tmp_path, monkeypatch, timeout=300)
    assert all(c == 0 for c in codes), codes
    from speechtrain.train.metrics import read_metrics
    from tests.test_train_engine import assert_params_close

    ranks = [torch.load(tmp_path / f"{r}.pt") for r in (0, 1)]
    for model in MODELS:
        for accum in (1, 2):
            ref_losses, ref_params = _run(model, None, accum)
            for r in ranks:
                got = r[model, accum]["losses"]
                assert [set(x) for x in got] == [set(x) for x in ref_losses]
                for step, (a, b) in enumerate(zip(got, ref_losses)):
                    for k in a:
                        assert abs(a[k] - b[k]) <= 1e-5, f"{model} x{accum} step {step + 1} {k}: {a[k]} vs {b[k]}"
                assert_params_close(r[model, accum]["params"], ref_params, atol=1e-5)
            assert_params_close(ranks[0][model, accum]["params"], ranks[1][model, accum]["params"], atol=0)
    # a resumed 2-rank run is the uninterrupted one: weights and (rank-mean) per-step losses
    for r in ranks:
        assert_params_close(r["resume"]["resumed"], r["resume"]["full"], atol=0)
    full, cut = (read_metrics(tmp_path / name) for name in ("full", "cut"))
    assert [row["step"] for row in cut] == [1, 2, 3, 4]
    assert [row["loss"] for row in cut] == [row["loss"] for row in full]
    # SIGTERM on one rank: every rank stops at the same step, rank 0 saved it
    stops = [r["sigterm"] for r in ranks]
    assert stops[1]["stopped"] == "signal SIGTERM" and stops[0]["stopped"] == "a stop on another rank"
    assert stops[0]["steps"] == stops[1]["steps"] >= 2
    from speechtrain.train import checkpoint as ckpt

    assert ckpt.list_checkpoints(tmp_path / "sigterm_run" / "checkpoints")[-1][0] == stops[0]["steps"]


TOY_RUN = [
    "model.name=speechtrain.testing.toy.task:build_toy",  # the CLI does not register the test families
    "model.channels=16",
    "data.max_frames=2500",
    "train.max_steps=4",
    "train.log_every=1",
    "train.eval_every=2",
    "train.save_every=2",
    "train.progress=false",
    "train.tensorboard=false",
    "train.device=cpu",
    "accel.precision=fp32",
]


GPT_RUN = [  # GPT-TTS sharded per transformer block (FSDP2 on the CPU with gloo)
    f"--config={ROOT / 'recipes' / 'gpt_tts_tiny.yaml'}",
    "train.strategy=fsdp",
    *TOY_RUN[3:],
]


@pytest.mark.parametrize("args,strategy", [(TOY_RUN, "ddp"), (GPT_RUN, "fsdp")], ids=["toy-ddp", "gpt_tts-fsdp"])
def test_speechtrain_train_under_torchrun(demo_data: list[str], tmp_path: Path, args: list[str], strategy: str) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None), env.pop("LOCAL_RANK", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "speechtrain", "train", *args, *demo_data, f"train.output_dir={run}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads((run / "accel.json").read_text())
    assert (records["world_size"], records["strategy"]) == (2, strategy)
    detail = records["strategy_detail"]
    assert detail["requested"] == ("auto" if strategy == "ddp" else "fsdp") and detail["reason"]
    if strategy == "ddp":  # auto: a toy model's replica fits in half of the RAM a rank has
        assert detail["reason"].startswith("auto: weights + gradients + optimizer state take")
        assert detail["reason"].endswith(": DDP")
    else:
        assert detail["fsdp_mixed_precision"] == "none (fp32)" and "gpt.blocks.0" in detail["sharded_units"]
    assert proc.stdout.count('"run_dir"') == 1, "rank 0 alone prints the summary"
    from speechtrain.train.metrics import read_metrics

    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4], "rank 0 alone writes one row per step"
    assert {p.name for p in (run / "checkpoints").iterdir()} >= {"step_00000004.pt"}
    state = torch.load(run / "checkpoints" / "step_00000004.pt", weights_only=False)
    assert state["loader"]["sampler"]["world_size"] == 2
    assert ("modules" in state) == (strategy == "ddp")
    assert (run / "checkpoints" / "step_00000004.dcp").is_dir() == (strategy == "fsdp")
    from speechtrain.recipes.inference import load_task

    _, task = load_task(run)  # synthesis / export read either layout in one process
    assert task.modules()


def _killed_worker(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    from speechtrain.errors import UserError
    from speechtrain.recipes import build_task
    from tests.test_train_engine import cfg_for, make_trainer

    cfg = cfg_for("train.max_steps=50", "train.save_every=100", "train.dist_timeout_minutes=1")
    tr = make_trainer(cfg, build_task(cfg), _SignalLoader(rank, signal.SIGKILL), None, Path(out_dir) / "run")
    try:
        tr.fit()
    except UserError as exc:
        (Path(out_dir) / f"error_{rank}.txt").write_text(str(exc))
        dist.destroy_process_group()  # as TrainRecipe.run does (else gloo's threads abort the exit)
        raise SystemExit(2) from None


def test_kill_9_of_one_rank_ends_the_other_with_a_clear_message(tmp_path: Path, monkeypatch) -> None:
    codes = spawn_ranks(_killed_worker, tmp_path, monkeypatch, timeout=180, hung="the surviving rank hung")
    assert codes == [2, -signal.SIGKILL]
    message = (tmp_path / "error_0.txt").read_text()
    assert "rank 0: another rank stopped answering during step" in message
    assert "speechtrain train --resume" in message


def _fsdp_worker(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        from speechtrain.train.distributed import full_state

        results: dict = {}
        for accum in (1, 2):
            kept: list = []
            results[accum] = dict(zip(("losses", "params"), _run("toy", rank, accum, "train.strategy=fsdp", keep=kept)))
            if accum == 2:  # a sharded checkpoint written by the 2 ranks
                kept[0].run_dir = Path(out_dir) / "fsdp_run"
                kept[0].save_checkpoint()
        results["units"] = kept[0].sharded_units
        # a fresh pair of FSDP ranks resumes it, and its next step is the uninterrupted run's next step
        resumed = _trainer("toy", "train.strategy=fsdp")
        resumed.run_dir = Path(out_dir) / "fsdp_run"
        assert resumed.resume() and resumed.step == STEPS
        micro = _batches(STEPS, 4)[rank * 2 : (rank + 1) * 2]
        for name, tr in (("continued", kept[0]), ("resumed", resumed)):
            loss = float(tr.train_step(micro)["loss"])
            mods, _ = full_state(tr.modules, tr.optimizers, tr.checkpointer.stage_modules())
            results[name] = {"loss": loss, "params": {f"{m}.{k}": v for m, sd in mods.items() for k, v in sd.items()}}
        # bf16: FSDP2 all-gathers and computes the parameters in bf16 (MixedPrecisionPolicy), reduces in fp32
        bf16: list = []
        seen: list = []
        tr = _trainer("toy", "train.strategy=fsdp", "accel.precision=bf16")
        conv = next(m for m in tr.modules["model"].modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Linear)))
        conv.register_forward_pre_hook(lambda m, args: seen.append(m.weight.dtype))
        for step in range(STEPS):
            bf16.append(float(tr.train_step(_batches(step, 2)[rank : rank + 1])["loss"]))
        results["bf16"] = {"losses": bf16, "dtypes": seen, "policy": tr.fsdp_mixed_precision}
        torch.save(results, Path(out_dir) / f"fsdp_{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_fsdp2_two_ranks_equal_one_process_and_its_checkpoint_loads_in_one(tmp_path: Path, monkeypatch) -> None:
    """FSDP2 on the CPU with gloo (fully_shard per block, then per module): 2 ranks x B equal 1 process
    accumulating 2 x B; the 2 ranks write a sharded checkpoint (DCP: one shard file per rank, the run state
    in step_N.pt), which 2 fresh ranks resume exactly and 1 plain process loads and continues; bf16 runs
    with FSDP2's mixed precision (bf16 parameters, fp32 reduction) and finite losses."""
    import math

    codes = spawn_ranks(_fsdp_worker, tmp_path, monkeypatch, timeout=300)
    assert all(c == 0 for c in codes), codes
    from speechtrain.train import checkpoint as ckpt
    from speechtrain.train.rundir import RunDir
    from tests.test_train_engine import assert_params_close, params

    r0, r1 = (torch.load(tmp_path / f"fsdp_{r}.pt", weights_only=False) for r in (0, 1))
    assert "model.blocks.0" in r0["units"] and "model" in r0["units"]
    for accum in (1, 2):
        ref_losses, ref_params = _run("toy", None, accum)
        for r in (r0, r1):
            for step, (a, b) in enumerate(zip(r[accum]["losses"], ref_losses)):
                assert abs(a["loss"] - b["loss"]) <= 1e-5, f"x{accum} step {step + 1}: {a} vs {b}"
        assert_params_close(r0[accum]["params"], ref_params, atol=1e-5)
    # the layout: each rank's shards in step_N.dcp/, the run state alone in step_N.pt (the commit marker)
    checkpoints = tmp_path / "fsdp_run" / "checkpoints"
    assert {p.name for p in (checkpoints / f"step_{STEPS:08d}.dcp").iterdir()} == {
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    }
    step_file = torch.load(checkpoints / f"step_{STEPS:08d}.pt", weights_only=True)
    assert "modules" not in step_file and "optimizers" not in step_file
    assert step_file["shards"] == f"step_{STEPS:08d}.dcp" and len(step_file["rng_ranks"]) == 2
    # 2 fresh ranks resumed it: their next step is the uninterrupted run's
    assert r0["resumed"]["loss"] == r0["continued"]["loss"]
    assert_params_close(r0["resumed"]["params"], r0["continued"]["params"], atol=0)
    # 1 plain process (no process group) loads it: the 2 ranks' weights, and the optimizer state goes on
    found = RunDir(tmp_path / "fsdp_run").latest()
    assert found is not None and found[1]["step"] == STEPS
    one = _trainer("toy")
    one.load_state_dict(found[1])
    assert_params_close(params(one), r0[2]["params"], atol=0)
    loss = float(one.train_step(_batches(STEPS, 4))["loss"])
    assert abs(loss - r0["continued"]["loss"]) <= 1e-5
    assert_params_close(params(one), r0["continued"]["params"], atol=1e-5)  # momentum buffers loaded too
    # the full weights of the run for export / synthesis / init_from, without a process group
    full = ckpt.module_states(found[1], found[0])
    assert_params_close({f"model.{k}": v for k, v in full["model"].items()}, r0[2]["params"], atol=0)
    # bf16
    for r in (r0, r1):
        assert r["bf16"]["policy"] == "param bf16, reduce fp32"
        assert r["bf16"]["dtypes"] and set(r["bf16"]["dtypes"]) == {torch.bfloat16}
        assert all(math.isfinite(v) for v in r["bf16"]["losses"]), r["bf16"]["losses"]


def test_a_rank_whose_micro_batch_is_left_out_stays_in_step_under_torchrun(
    demo_data: list[str], tmp_path: Path
) -> None:
    """`SPEECHTRAIN_INJECT_OOM_FRAMES=100000,700 torchrun --nproc-per-node 2 -m speechtrain train --config
    recipes/gpt_tts_tiny.yaml`: rank 1 left out an utterance that does not fit alone, then met rank 0's gradient
    all-reduce with its next collective (gloo EnforceNotMet, rank 1 exit -6, no checkpoint). Now: exit 0, each
    left-out utterance reported once (log and metrics), and both ranks' weights equal after every step."""
    from speechtrain.memory.oom import INJECT_ENV
    from speechtrain.train.metrics import read_metrics

    run, sums = tmp_path / "run", tmp_path / "sums"
    sums.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None), env.pop("LOCAL_RANK", None)
    env[INJECT_ENV] = "100000,700"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [str(ROOT / "tests" / "torchrun_checksums.py"), str(sums), "train"]
    cmd += [f"--config={ROOT / 'recipes' / 'gpt_tts_tiny.yaml'}", *demo_data, f"train.output_dir={run}"]
    cmd += ["train.max_steps=6", "train.log_every=2", "train.save_every=3", "train.eval_every=100"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = [[json.loads(line) for line in (sums / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert [s["step"] for s in steps[0]] == [s["step"] for s in steps[1]] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(*steps):
        assert a["weights"] == b["weights"], f"the ranks' weights differ after step {a['step']}"
    warned = [line for line in proc.stderr.splitlines() if "runs out of memory on its own" in line]
    ids = [line.split("utterance ")[1].split(" ")[0] for line in warned]
    assert ids and len(ids) == len(set(ids)) and all(line.startswith("[rank 1]") for line in warned), warned
    events = [e for r in read_metrics(run) for e in r.get("events", []) if e["event"] == "oom_skipped"]
    assert sorted(e["id"] for e in events) == sorted(ids) and {e["rank"] for e in events} == {1}
    assert json.loads(proc.stdout[proc.stdout.index("{") :])["oom_skipped"] == len(ids)
    assert {p.name for p in (run / "checkpoints").iterdir()} >= {"step_00000003.pt", "step_00000006.pt"}
