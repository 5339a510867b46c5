"""Issue 26, "Why": the combinations a new user reaches in the first hour that broke, each tried as the user
tried it (the command line, torchrun on 2 gloo processes, the web UI's API).

(a) ``torchrun -m speechtrain tune`` of gpt_tts deadlocked (rank 0's set-up broadcast the codebook while the
    other rank waited in a barrier); (b) ``speechtrain tune`` of vits failed on speakers; (c) ``strategy=fsdp`` of
    xtts crashed at step 1 (mixed Tensor/DTensor); (d) the UI's Vocode of an NSF-HiFiGAN run called vocode(mel)
    without f0; (e) ``synthesize``/``rtf`` of an FSDP run named by a relative path failed; (f) FSDP runs exited -6
    after finishing (the process group outlived main).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.doors import RECIPES, TINY, output, steps, torchrun

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

TUNE_FAST = ["tune.max_batch_size=4", "tune.steps_per_trial=1", "tune.margin_gib=0"]


def test_a_gpt_tts_tune_under_torchrun_ends(demo_data: list[str], tmp_path: Path) -> None:
    """(a) Each rank sets up its task together with the others (the codebook broadcast), then tunes alone:
    no rank waits in a barrier while another broadcasts. A short distributed timeout turns a deadlock into a
    failure within half a minute instead of ten."""
    out = tmp_path / "tuned.yaml"
    args = ["tune", "--config", str(RECIPES / "gpt_tts_tiny.yaml"), "--out", str(out), "--quiet", *demo_data]
    proc = torchrun([*args, *TUNE_FAST, *TINY, "train.dist_timeout_minutes=0.5"], tmp_path)
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.count("wrote ") == 1 and out.is_file()


def test_b_vits_tune_in_one_process(demo_data: list[str], tmp_path: Path) -> None:
    """(b) The estimate inside tune set a fresh VITS up on a synthetic set of two speakers, which a
    single-speaker VITS refuses: the synthetic set has one speaker."""
    from speechtrain.cli.main import main

    out = tmp_path / "tuned.yaml"
    args = ["tune", "--config", str(RECIPES / "vits_tiny.yaml"), "--out", str(out), "--quiet", *demo_data]
    assert main([*args, *TUNE_FAST, *TINY]) == 0
    assert out.is_file()


def _xtts_args(demo_data: list[str], tmp_path: Path, run: Path) -> list[str]:
    base = ["--config", str(RECIPES / "xtts_finetune_tiny.yaml"), *demo_data, "model.language=en"]
    return [*base, f"model.checkpoint_dir={tmp_path / 'base'}", f"train.output_dir={run}", *TINY]


def test_c_xtts_under_fsdp_trains_evaluates_saves_and_synthesizes(demo_data: list[str], tmp_path: Path) -> None:
    """(c) The conditioning latents are computed by the GPT outside its forward: that method all-gathers the
    sharded parameters as the forward does, and the frozen modules (DVAE, decoder) stay whole."""
    run = tmp_path / "run"
    args = ["train", *_xtts_args(demo_data, tmp_path, run), *steps(2), "train.strategy=fsdp"]
    proc = torchrun([*args, "train.dist_timeout_minutes=1"], tmp_path)
    assert proc.returncode == 0, output(proc)
    accel = json.loads((run / "accel.json").read_text())
    assert accel["strategy"] == "fsdp" and "gpt.gpt.h.0" in accel["strategy_detail"]["sharded_units"]
    assert list((run / "samples").glob("step_*/*.wav")), "the eval audio of a sharded XTTS"
    assert (run / "checkpoints" / "step_00000002.dcp").is_dir()
    from speechtrain.cli.main import main

    wav, ref = tmp_path / "out.wav", sorted(Path(demo_data[0].split("=", 1)[1]).glob("wavs/*.wav"))[0]
    cli = ["synthesize", str(run), "--text", "hello", "--speaker-wav", str(ref), "--max-seconds", "0.5"]
    assert main([*cli, "--out", str(wav), "--device", "cpu", "--seed", "0"]) == 0 and wav.is_file()


def test_d_the_uis_vocode_of_an_nsf_run_measures_f0_as_the_cli_does(
    singing_data: list[str], singing_corpus: Path, tmp_path: Path
) -> None:
    """(d) The UI's Vocode and ``speechtrain vocode --audio`` go through one inference recipe: both measure f0
    for an NSF vocoder, and they write the same audio."""
    import soundfile as sf

    from speechtrain.cli.main import main
    from speechtrain.ui import backend

    run = tmp_path / "nsf"
    config = ["--config", str(RECIPES / "vocoder_nsf_hifigan_tiny.yaml"), *singing_data]
    assert main(["train", *config, *TINY, *steps(1), f"train.output_dir={run}"]) == 0
    wav = sorted((singing_corpus / "wavs").glob("*.wav"))[0]
    torch.manual_seed(0)  # the harmonic source's noise
    ui = backend.vocode(run, wav, tmp_path / "ui.wav")
    assert ui.seconds > 0
    torch.manual_seed(0)
    assert main(["vocode", str(run), "--audio", str(wav), "--out", str(tmp_path / "cli.wav"), "--device", "cpu"]) == 0
    a, _ = sf.read(tmp_path / "ui.wav")
    b, _ = sf.read(tmp_path / "cli.wav")
    assert a.shape == b.shape and np.abs(a - b).max() < 1e-3  # both 16-bit files of one computation


@pytest.fixture(scope="module")
def fsdp_gpt_run(demo_data: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-TTS run trained under torchrun with FSDP2 (2 gloo ranks): sharded checkpoints and best.dcp."""
    folder = tmp_path_factory.mktemp("fsdp_gpt")
    run = folder / "runs" / "gpt"
    args = ["train", "--config", str(RECIPES / "gpt_tts_tiny.yaml"), *demo_data, *TINY, *steps(2)]
    proc = torchrun([*args, "train.strategy=fsdp", f"train.output_dir={run}"], folder)
    assert proc.returncode == 0, output(proc)
    assert (run / "best.dcp").is_dir()
    return run


def test_e_synthesize_and_rtf_of_an_fsdp_run_named_by_a_relative_path(
    fsdp_gpt_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(e) ``speechtrain synthesize runs/X`` read best.pt's shard folder entry as a path relative to the working
    directory, then refused it as "not a folder name beside the file"."""
    from speechtrain.cli.main import main

    monkeypatch.chdir(fsdp_gpt_run.parent.parent)
    relative = str(Path("runs") / fsdp_gpt_run.name)
    wav = tmp_path / "out.wav"
    assert main(["synthesize", relative, "--text", "hello", "--out", str(wav), "--max-seconds", "0.3"]) == 0
    report = tmp_path / "rtf.json"
    assert main(["rtf", relative, "--warmup", "0", "--texts", str(_one_sentence(tmp_path)), "--json", str(report)]) == 0
    assert json.loads(report.read_text())["rtf"] > 0


def _one_sentence(folder: Path) -> Path:
    path = folder / "texts.txt"
    path.write_text("hello there\n", encoding="utf-8")
    return path


def test_e_a_copied_fsdp_run_loads_by_any_path(
    fsdp_gpt_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(e) A run directory is found by whatever path names it: relative, absolute, or moved elsewhere."""
    from speechtrain.recipes.inference import load_task

    moved = tmp_path / "elsewhere" / "gpt"
    shutil.copytree(fsdp_gpt_run, moved)
    monkeypatch.chdir(tmp_path)
    for path in (Path("elsewhere/gpt"), moved, Path("elsewhere/../elsewhere/gpt")):
        _, task = load_task(path, device="cpu")
        assert task.modules()


_FSDP_FREED = (
    "import gc, weakref, torch\n"
    "from speechtrain.train.distributed import init_from_env, shard_modules, shutdown\n"
    "started = init_from_env(torch.device('cpu'))\n"
    "group = weakref.ref(torch.distributed.distributed_c10d._get_default_group())\n"
    "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))\n"
    "shard_modules({'model': model})\n"
    "model(torch.randn(3, 4)).sum().backward()\n"
    "del model\n"
    "shutdown(started)\n"
    "gc.collect()\n"
    "print('freed' if group() is None else 'alive')\n"
)


def test_f_shutdown_frees_the_process_group_after_fsdp() -> None:
    """(f) FSDP runs exited -6 after finishing, now and then ("terminate called without an active exception").
    FSDP2's DTensor parameters live on a DeviceMesh, which holds the process group; DTensor's sharding cache
    keeps those meshes for the life of the process, so the destroyed gloo group outlived main and was torn
    down during the interpreter's shutdown. After shutdown the group must be gone."""
    from tests.test_train_distributed import _torchrun_pair

    ranks = _torchrun_pair(_FSDP_FREED)
    assert [code for code, _ in ranks] == [0, 0]
    assert [out.split() for _, out in ranks] == [["freed"], ["freed"]]
