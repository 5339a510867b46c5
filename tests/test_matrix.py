"""The matrix (docs/matrix.md): every registered family and a model of your own (examples/own_model.py), through
every door it declares, under every strategy it accepts, each cell a tiny run; every refused cell refused when the
config is read, with the reason the table shows.

The cells come from :func:`speechtrain.recipes.matrix.matrix` (the registry), so a new family or capability
adds its cells here without an edit, and a family without a spec below fails. The doc check and the refusals are
fast; the runs are marked slow (CI runs them): one trained run per family (train 2 steps, resume to 3) serves
the inference, rtf, export and UI cells; torchrun runs 2 gloo processes.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from speechtrain.registry import BUILT_IN as BUILT_IN_FAMILIES
from tests.doors import RECIPES, ROOT, TINY, output, steps, torchrun

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.filterwarnings("ignore:::gradio.queueing")]

OWN_MODEL = "own model"
TUNE_FAST = ["tune.max_batch_size=4", "tune.steps_per_trial=1", "tune.margin_gib=0"]


@dataclass(frozen=True)
class Spec:
    """How a family's tiny runs are made: its recipe, the corpus it reads (demo, its classes/ folders, the
    singing corpus with f0) and extra overrides."""

    recipe: Path
    corpus: str = "demo"
    extra: tuple[str, ...] = ()


SPECS = {
    "hifigan": Spec(RECIPES / "vocoder_hifigan_tiny.yaml"),
    "nsf_hifigan": Spec(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", "singing"),
    "gpt_tts": Spec(RECIPES / "gpt_tts_tiny.yaml"),
    "cnn_lstm": Spec(RECIPES / "classifier_cnn_lstm_tiny.yaml", "classes"),
    "vits": Spec(RECIPES / "vits_tiny.yaml"),
    "xtts": Spec(RECIPES / "xtts_finetune_tiny.yaml", extra=("model.language=en",)),
    OWN_MODEL: Spec(ROOT / "examples" / "own_model.yaml", extra=("model.hidden=16",)),
}


def _rows() -> list[Any]:
    from speechtrain.recipes.matrix import matrix, user_row_for

    own = user_row_for("examples.own_model:build_task", OWN_MODEL, "examples/own_model.py", [ROOT])
    return matrix([own])


ROWS = _rows()
CELLS = [(row.family, cell) for row in ROWS for cell in [*row.doors, *row.strategies]]
WORKS = [pytest.param(f, c.door, id=f"{f}-{c.door}") for f, c in CELLS if c.works]
REFUSED = [pytest.param(f, c.door, id=f"{f}-{c.door}") for f, c in CELLS if not c.works]


def _cell(family: str, door: str) -> Any:
    return next(row for row in ROWS if row.family == family).cell(door)


# ------------------------------------------------------------------------------------------- the table itself
def test_the_doc_is_the_table_the_registry_gives() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("write_matrix", ROOT / "scripts" / "write_matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8") == module.generate(), (
        "docs/matrix.md is stale: run python3 scripts/write_matrix.py"
    )


def test_every_family_has_a_spec_and_keeps_its_declared_capabilities() -> None:
    from speechtrain import registry

    assert set(SPECS) == {*registry.BUILT_IN, OWN_MODEL}, "add the new family's tiny recipe to SPECS"
    for name in registry.BUILT_IN:
        registry.check_family(name)  # every member of every capability it declares is on its task class


def test_a_family_declaring_what_its_task_lacks_is_refused_when_it_registers() -> None:
    from speechtrain import registry

    with pytest.raises(TypeError, match="offers 'export' but HiFiGANTask has no export, export_format"):
        registry.register_family(
            "broken", "speechtrain.models.hifigan", "HiFiGANConfig", task_class="HiFiGANTask", offers=("export",)
        )
    assert "broken" not in registry.families()


# ------------------------------------------------------------------------------------------- shared set-up
@pytest.fixture(scope="session")
def matrix_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The UI's workspace: the runs of the matrix under runs/, its data under data/."""
    root = tmp_path_factory.mktemp("matrix")
    (root / "runs").mkdir()
    (root / "data").mkdir()
    return root


@pytest.fixture(scope="session")
def corpora(
    demo_corpus: Path, demo_data: list[str], singing_data: list[str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[str]]:
    classes = [f"data.manifest={demo_corpus / 'classes'}", f"data.cache_dir={tmp_path_factory.mktemp('classes')}"]
    return {"demo": demo_data, "classes": classes, "singing": singing_data}


@pytest.fixture(scope="session")
def family_args(corpora: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[str]]:
    """``--config RECIPE`` and the overrides of a family's tiny runs (XTTS: its random tiny base written once)."""
    base = tmp_path_factory.mktemp("xtts_base") / "base"
    made: list[bool] = []

    def args(family: str) -> list[str]:
        spec = SPECS[family]
        out = ["--config", str(spec.recipe), *corpora[spec.corpus], *spec.extra, *TINY]
        if family == "xtts":
            out.append(f"model.checkpoint_dir={base}")
            if not made:  # written here once: two torchrun ranks must not both write it
                from speechtrain.config import load_config
                from speechtrain.recipes.common import build_task

                build_task(load_config(spec.recipe, out[2:]))
                made.append(True)
        return out

    return args


@pytest.fixture(scope="session")
def trained(matrix_root: Path, family_args: Callable[[str], list[str]]) -> Callable[[str], Path]:
    """A family's run in one process: ``speechtrain train`` 2 steps, then ``train --resume`` to step 3 (made once
    per session, in the UI's workspace)."""
    from speechtrain.cli.main import main

    runs: dict[str, Path] = {}

    def run(family: str) -> Path:
        if family not in runs:
            path = matrix_root / "runs" / family.replace(" ", "_")
            assert main(["train", *family_args(family), *steps(2), f"train.output_dir={path}"]) == 0
            assert main(["train", "--resume", str(path), "train.max_steps=3", "train.save_every=3"]) == 0
            runs[family] = path
        return runs[family]

    return run


def _wav(family: str, corpora: dict[str, list[str]]) -> Path:
    manifest = Path(corpora[SPECS[family].corpus][0].split("=", 1)[1])
    return sorted(manifest.rglob("*.wav"))[0]


# ------------------------------------------------------------------------------------------- refused cells
@pytest.mark.parametrize("family,door", REFUSED)
def test_a_refused_cell_is_refused_when_the_config_is_read(
    family: str, door: str, tmp_path: Path, family_args: Callable[[str], list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from speechtrain.cli.main import main
    from speechtrain.config import ConfigError, load_config, save_config
    from speechtrain.recipes.inference import WHY_NOT

    cell = _cell(family, door)
    args = family_args(family)
    if door == "FSDP2 x2":
        with pytest.raises(ConfigError) as err:
            load_config(args[1], [*args[2:], "train.strategy=fsdp"])
        assert cell.why in str(err.value)
        return
    run = tmp_path / "run"  # a run directory holding its config alone: a refusal from the weights would fail
    run.mkdir()
    save_config(load_config(args[1], args[2:]), run / "config.yaml")
    wav = tmp_path / "in.wav"
    commands = {
        "export": [["export", str(run), str(tmp_path / "out")]],
        "rtf": [["rtf", str(run)]],
        "inference": [
            ["synthesize", str(run), "--text", "hello", "--out", str(tmp_path / "out.wav")],
            ["vocode", str(run), "--audio", str(wav), "--out", str(tmp_path / "out.wav")],
            ["classify", str(run), str(wav)],
        ],
    }[door]
    wav.write_bytes(b"")  # classify checks the file exists before reading the run
    for command in commands:
        assert main(command) == 2, command
        err = capsys.readouterr().err
        verb = command[0]
        assert "has no checkpoint" not in err, err
        if verb != "export":  # export's reasons are the export formats' (speechtrain/export/formats.py)
            assert WHY_NOT[verb] in err, err
        if door != "inference":
            assert cell.why in err


# ------------------------------------------------------------------------------------------- cells that work
def _metrics_steps(run: Path) -> list[int]:
    from speechtrain.train.metrics import read_metrics

    return [r["step"] for r in read_metrics(run)]


def _door_train(family: str, trained: Callable[[str], Path], **_: Any) -> None:
    run = trained(family)
    assert (run / "checkpoints" / "step_00000002.pt").is_file() and (run / "config.yaml").is_file()


def _door_resume(family: str, trained: Callable[[str], Path], **_: Any) -> None:
    run = trained(family)
    assert _metrics_steps(run) == [1, 2, 3], "the resumed run continues at step 3, each row once"
    assert (run / "checkpoints" / "step_00000003.pt").is_file()


def _door_tune(family: str, family_args: Callable[[str], list[str]], tmp_path: Path, **_: Any) -> None:
    from speechtrain.cli.main import main

    out, report = tmp_path / "tuned.yaml", tmp_path / "tune.json"
    assert main(["tune", "--out", str(out), "--json", str(report), "--quiet", *family_args(family), *TUNE_FAST]) == 0
    from speechtrain.config import load_config

    load_config(out)
    assert all(b["batch_size"] >= 1 for b in json.loads(report.read_text())["buckets"])


def _door_bench(family: str, family_args: Callable[[str], list[str]], tmp_path: Path, **_: Any) -> None:
    from speechtrain.bench.ablate import RUNGS
    from speechtrain.cli.main import main

    skips = [a for rung in RUNGS if rung not in ("baseline", "engine", "all") for a in ("--skip", rung)]
    fast = ["--in-process", "--steps", "1", "--warmup", "0", "--min-seconds", "0", "--repeat", "1"]
    report = tmp_path / "bench.json"
    assert main(["bench", *family_args(family), "--ablate", *fast, *skips, "--json", str(report)]) == 0
    runs = json.loads(report.read_text())["runs"]
    assert len(runs) == 3 and all(r["steps"] >= 1 and r["audio_seconds_per_second"] > 0 for r in runs), runs


def _door_inference(
    family: str, trained: Callable[[str], Path], corpora: dict[str, list[str]], tmp_path: Path, **_: Any
) -> None:
    import soundfile as sf

    from speechtrain.cli.main import main

    run, verb = trained(family), _cell(family, "inference").how.split()[1]
    out = tmp_path / "out.wav"
    if verb == "synthesize":
        extra = ["--speaker-wav", str(_wav(family, corpora))] if family == "xtts" else []
        assert main(["synthesize", str(run), "--text", "hello", "--out", str(out), "--seed", "0", *extra]) == 0
    elif verb == "vocode":
        assert main(["vocode", str(run), "--audio", str(_wav(family, corpora)), "--out", str(out)]) == 0
    else:
        assert main(["classify", str(run), str(_wav(family, corpora)), "--json"]) == 0
        return
    assert sf.info(out).frames > 0


def _door_rtf(
    family: str, trained: Callable[[str], Path], corpora: dict[str, list[str]], tmp_path: Path, **_: Any
) -> None:
    from speechtrain.cli.main import main

    report = tmp_path / "rtf.json"
    args = ["rtf", str(trained(family)), "--warmup", "0", "--items", "1", "--json", str(report)]
    if _cell(family, "inference").how.endswith("synthesize"):
        texts = tmp_path / "texts.txt"
        texts.write_text("hello there\n", encoding="utf-8")
        args += ["--texts", str(texts)]
        if family == "xtts":
            args += ["--speaker-wav", str(_wav(family, corpora))]
    assert main(args) == 0
    result = json.loads(report.read_text())
    assert result["rtf"] > 0 and result["audio_seconds"] > 0 and len(result["items"]) == 1


#: a VITS run bound for Piper trains on Piper's own phoneme ids (issue 39): its export door trains one so
PIPER_BOUND = ["data.phonemizer=piper", "model.add_blank=false", "data.language=en"]


def _door_export(
    family: str, trained: Callable[[str], Path], family_args: Callable[[str], list[str]], tmp_path: Path, **_: Any
) -> None:
    from speechtrain.cli.main import main

    run = trained(family)
    if family == "vits":  # the matrix's VITS trains on characters, which Piper's runtime does not read: refused
        assert main(["export", str(run), str(tmp_path / "refused")]) == 2
        assert not (tmp_path / "refused").exists()
        run = tmp_path / "piper_bound"
        assert main(["train", *family_args(family), *PIPER_BOUND, *steps(2), f"train.output_dir={run}"]) == 0
    assert main(["export", str(run), str(tmp_path / "exported")]) == 0
    assert any((tmp_path / "exported").iterdir())


def _door_ui(
    family: str, trained: Callable[[str], Path], corpora: dict[str, list[str]], served: Any, tmp_path: Path, **_: Any
) -> None:
    """The web UI's API (gradio_client on the served page): the Listen tab's endpoint of the family's verb on its
    run; a family without one (a model of your own) through the jobs: /start_train of its config, to the end."""
    from gradio_client import Client, handle_file

    client = Client(served, verbose=False)
    run = trained(family)
    how = _cell(family, "UI API").how
    if how.endswith("/synthesize"):
        status, wav = client.predict(run.name, "hello", api_name="/synthesize")
    elif how.endswith("/vocode"):
        status, wav = client.predict(run.name, handle_file(str(_wav(family, corpora))), api_name="/vocode")
    elif how.endswith("/classify"):
        status, table = client.predict(run.name, handle_file(str(_wav(family, corpora))), api_name="/classify")
        assert status.startswith("label **"), status
        return
    else:
        _ui_job(client, family, run, corpora)
        return
    assert "RTF" in status and Path(wav).stat().st_size > 44, status


def _ui_job(client: Any, family: str, run: Path, corpora: dict[str, list[str]]) -> None:
    import time

    spec = SPECS[family]
    manifest, *more = corpora[spec.corpus]
    corpus = Path(manifest.split("=", 1)[1])
    data = run.parent.parent / "data" / f"{spec.corpus}-{corpus.name}"  # the page reads datasets under --data only
    if not data.exists():
        data.symlink_to(corpus, target_is_directory=True)  # as an operator links a corpus there
    more = [_linked_cache(o, data) for o in more]  # and its feature cache: the page's paths stay in its folders
    name = f"{run.name}_ui"
    overrides = " ".join([*more, *spec.extra, *TINY, *steps(1)])
    status, _ = client.predict(str(spec.recipe), str(data), "auto", "", overrides, name, 1, api_name="/start_train")
    assert status == f"started {name}", status
    end = time.monotonic() + 300
    view = client.predict(name, api_name="/run_view")
    while "finished" not in view[0] and "failed" not in view[0] and time.monotonic() < end:
        time.sleep(1.0)
        view = client.predict(name, api_name="/run_view")
    assert "finished" in view[0], f"{view[0]}\n{view[-1]}"


def _linked_cache(override: str, data: Path) -> str:
    """``data.cache_dir=X`` as the page may name it: a link to X beside the linked corpus, under --data."""
    key, _, value = override.partition("=")
    if key != "data.cache_dir":
        return override
    link = data.with_name(f"{data.name}-cache")
    if not link.exists():
        link.symlink_to(value, target_is_directory=True)
    return f"{key}={link}"


def _accel(run: Path) -> dict[str, Any]:
    return json.loads((run / "accel.json").read_text())


def _door_ddp(family: str, family_args: Callable[[str], list[str]], tmp_path: Path, **_: Any) -> None:
    run = tmp_path / "run"
    proc = torchrun(["train", *family_args(family), *steps(2), f"train.output_dir={run}"], tmp_path)
    assert proc.returncode == 0, output(proc)
    assert (_accel(run)["world_size"], _accel(run)["strategy"]) == (2, "ddp")
    assert _metrics_steps(run) == [1, 2]


def _door_fsdp(family: str, family_args: Callable[[str], list[str]], tmp_path: Path, **_: Any) -> None:
    run = tmp_path / "run"
    args = ["train", *family_args(family), *steps(2), "train.strategy=fsdp", f"train.output_dir={run}"]
    proc = torchrun(args, tmp_path)
    assert proc.returncode == 0, output(proc)
    assert (_accel(run)["world_size"], _accel(run)["strategy"]) == (2, "fsdp")
    assert (run / "checkpoints" / "step_00000002.dcp").is_dir()


def _door_tune_torchrun(family: str, family_args: Callable[[str], list[str]], tmp_path: Path, **_: Any) -> None:
    out = tmp_path / "tuned.yaml"
    args = ["tune", "--out", str(out), "--quiet", *family_args(family), *TUNE_FAST, "train.dist_timeout_minutes=1"]
    proc = torchrun(args, tmp_path)
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.count("wrote ") == 1 and out.is_file()


DOORS: dict[str, Callable[..., None]] = {
    "train": _door_train,
    "resume": _door_resume,
    "tune": _door_tune,
    "bench --ablate": _door_bench,
    "inference": _door_inference,
    "rtf": _door_rtf,
    "export": _door_export,
    "UI API": _door_ui,
    "one process": _door_train,
    "torchrun DDP x2": _door_ddp,
    "FSDP2 x2": _door_fsdp,
    "tune under torchrun x2": _door_tune_torchrun,
}


def test_every_door_and_strategy_has_a_runner() -> None:
    from speechtrain.recipes.matrix import DOORS as TABLE_DOORS
    from speechtrain.recipes.matrix import STRATEGIES

    assert set(DOORS) == {*TABLE_DOORS, *STRATEGIES}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def served(matrix_root: Path) -> Iterator[str]:
    """The web UI on 127.0.0.1 over the matrix's workspace (its runs are the trained ones)."""
    from speechtrain.ui.app import launch

    app, url = launch(
        port=_free_port(),
        runs_root=matrix_root / "runs",
        data_root=matrix_root / "data",
        block=False,
        quiet=True,
        allow_models=["examples.own_model:build_task"],  # the page builds a model of your own when told to
        recipe_folders=[ROOT / "examples"],  # and reads its recipe from the operator's folder
    )
    yield url
    from speechtrain.ui import jobs, runs

    for run in runs.find_runs(matrix_root / "runs"):  # nothing left running behind the tests
        jobs.stop(runs.job_folder(run))
        jobs.wait(runs.job_folder(run), 30)
    app.close()


@pytest.mark.slow
@pytest.mark.parametrize("family,door", WORKS)
def test_a_cell_that_works_runs(family: str, door: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    runner = DOORS[door]
    fixtures = {"trained": "trained", "family_args": "family_args", "corpora": "corpora"}
    kwargs: dict[str, Any] = {k: request.getfixturevalue(v) for k, v in fixtures.items()}
    if door == "UI API":
        kwargs["served"] = request.getfixturevalue("served")
    runner(family, tmp_path=tmp_path, **kwargs)


# ------------------------------------------------------------------------------------------- --vocoder
SYNTHESIZERS = [row.family for row in ROWS if row.cell("inference").how == "speechtrain synthesize"]


@pytest.mark.slow
@pytest.mark.parametrize("family", SYNTHESIZERS)
def test_synthesize_and_rtf_with_a_vocoder_run(
    family: str,
    trained: Callable[[str], Path],
    corpora: dict[str, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``synthesize RUN --vocoder VOCODER_RUN`` and ``rtf RUN --vocoder VOCODER_RUN`` from the command line: a family
    that makes mels speaks through a trained HiFi-GAN run (they always failed: the path was passed where a loaded
    vocoder was expected, and the error recommended the command that failed); a family that makes its audio itself
    is told that --vocoder does not apply, in the flag's name."""
    import soundfile as sf

    from speechtrain.cli.main import main
    from speechtrain.recipes.inference import families_taking

    run, vocoder = trained(family), trained("hifigan")
    out, report, texts = tmp_path / "out.wav", tmp_path / "rtf.json", tmp_path / "texts.txt"
    texts.write_text("hello there\n", encoding="utf-8")
    extra = ["--speaker-wav", str(_wav(family, corpora))] if family == "xtts" else []
    synthesize = ["synthesize", str(run), "--text", "hello", "--out", str(out), "--seed", "0", *extra]
    rtf = ["rtf", str(run), "--warmup", "0", "--texts", str(texts), "--json", str(report), *extra]
    capsys.readouterr()
    if family not in families_taking("vocoder_run"):
        for command in (synthesize, rtf):
            assert main([*command, "--vocoder", str(vocoder)]) == 2, command
            err = capsys.readouterr().err
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and "Traceback" not in err, err
            assert f"--vocoder does not apply to {run}" in errors[0] and "vocoder_run" not in errors[0], err
        return
    assert main([*synthesize, "--vocoder", str(vocoder)]) == 0
    assert sf.info(out).frames > 0 and sf.info(out).samplerate == 22050
    assert main([*rtf, "--vocoder", str(vocoder)]) == 0
    result = json.loads(report.read_text())
    assert result["rtf"] > 0 and result["audio_seconds"] > 0 and len(result["items"]) == 1
    # --vocoder naming a run that is not a mel-only vocoder: the flag named, and only doors that work recommended
    capsys.readouterr()
    assert main([*synthesize, "--vocoder", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --vocoder {run} is a '{family}' run, not a vocoder") and "hifigan" in err, err
    assert "nsf_hifigan" not in err, err  # it needs f0, which no TTS family gives
    assert main(["rtf", str(vocoder), "--vocoder", str(vocoder)]) == 2
    assert "--vocoder does not apply" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(BUILT_IN_FAMILIES))
def test_every_family_evaluates_with_its_quality_metrics(family: str, trained: Callable[[str], Path]) -> None:
    """The eval rows of a family's tiny run carry every quality metric of its kind (speechtrain.quality), a number
    each, beside how long they took; best.pt was picked by the family's default quality metric, not the loss."""
    from speechtrain.quality.catalog import DEFAULT_BEST, KINDS
    from speechtrain.registry import BUILT_IN
    from speechtrain.train.metrics import read_metrics

    kind = BUILT_IN[family].quality
    rows = read_metrics(trained(family), split="eval")
    assert [r["step"] for r in rows] == [2, 3]
    for row in rows:
        failed = row.get("quality_failed", {})
        missing = [m for m in KINDS[kind] if not isinstance(row.get(m), (int, float)) and m not in failed]
        assert not missing, f"{family}: the eval row lacks {missing}: {row}"
        assert "quality_missing" not in row  # the dev install has every package
        if kind != "classifier":
            assert row["quality_items"] == 2 and row["quality_seconds"] > 0 and 0 < row["quality_share"] < 1
    from speechtrain.train.checkpoint import safe_load

    assert safe_load(trained(family) / "best.pt")["best_metric"] == DEFAULT_BEST[kind]


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(BUILT_IN_FAMILIES))
def test_speechtrain_eval_scores_every_family_run(
    family: str, trained: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``speechtrain eval RUN`` on each family's tiny run: its kind's metrics in the table and the JSON."""
    from speechtrain.cli.main import main
    from speechtrain.quality.catalog import KINDS
    from speechtrain.registry import BUILT_IN

    out = tmp_path / "eval.json"
    assert main(["eval", str(trained(family)), "--device", "cpu", "--json", str(out)]) == 0
    scores = json.loads(out.read_text())["scores"]
    failed = json.loads(out.read_text())["extra"].get("quality_failed", {})
    assert {m for m in KINDS[BUILT_IN[family].quality] if m not in failed} <= set(scores), scores
    assert "better" in capsys.readouterr().out
