"""One reader for checkpoint files (speechtrain.ckptio): no other module of the package calls torch.load or
unpickles, and no door runs what a checkpoint carries -- export (every format and --consolidate) of a run whose
best.pt holds a pickle payload never runs it, and records the step of the weights it exported."""

from __future__ import annotations

import ast
import builtins
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from speechtrain.errors import CheckpointError
from tests.doors import RECIPES, ROOT, TINY, steps

PACKAGE = ROOT / "speechtrain"
READER = PACKAGE / "ckptio.py"

#: modules that unpickle (or run code a file names) whatever function they are handed
UNPICKLING_MODULES = {
    "pickle",
    "_pickle",
    "cPickle",
    "dill",
    "cloudpickle",
    "joblib",
    "shelve",
    "marshal",
    "pickletools",
}


# ------------------------------------------------------------------------------------------- the scan
def _dotted(node: ast.AST) -> str:
    """``torch.serialization.load`` of an attribute chain (``?`` for what is not a plain name)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _shard_reader(call: ast.Call) -> bool:
    """A DCP load given speechtrain's restricted reader (``storage_reader=shard_reader(...)``)."""
    return any(
        k.arg == "storage_reader" and isinstance(k.value, ast.Call) and _dotted(k.value.func).endswith("shard_reader")
        for k in call.keywords
    )


def _aliases(tree: ast.AST) -> dict[str, str]:
    """The names a module binds to modules (``import torch as t``: t -> torch; ``from torch import serialization``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


#: calls that unpickle what a file holds, by their full name
LOADERS = {
    "torch.load",
    "torch.serialization.load",
    "torch.jit.load",
    "torch.package.PackageImporter",
    "pandas.read_pickle",
    "numpy.load",  # flagged only with allow_pickle (below)
}


def unsafe_reads(source: str, name: str = "<module>") -> list[str]:
    """Where ``source`` loads a pickle itself: torch.load (by any name), pickle and its kin, an Unpickler,
    weights_only other than True, NumPy's allow_pickle, pandas' read_pickle, torch.jit/torch.package loaders, and
    a torch.distributed.checkpoint load without speechtrain's shard reader."""
    tree = ast.parse(source, name)
    aliases = _aliases(tree)

    def full(node: ast.AST) -> str:
        head, _, rest = _dotted(node).partition(".")
        resolved = aliases.get(head, head)
        return f"{resolved}.{rest}" if rest else resolved

    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in UNPICKLING_MODULES:
                    found.append(f"{where}: imports {module}")
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
            dotted = full(node)
            if dotted in LOADERS - {"numpy.load"} or dotted.rpartition(".")[2] in ("Unpickler", "read_pickle"):
                found.append(f"{where}: {dotted}")
        if not isinstance(node, ast.Call):
            continue
        func = full(node.func)
        if func == "getattr" and any(isinstance(a, ast.Constant) and a.value == "load" for a in node.args[1:]):
            found.append(f"{where}: getattr(..., 'load')")
        for kw in node.keywords:
            if kw.arg == "weights_only" and not (isinstance(kw.value, ast.Constant) and kw.value.value is True):
                found.append(f"{where}: weights_only={ast.unparse(kw.value)}")
            if kw.arg == "allow_pickle" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"{where}: allow_pickle={ast.unparse(kw.value)}")
        if func.startswith("torch.distributed.checkpoint") and func.endswith(".load") and not _shard_reader(node):
            found.append(f"{where}: {func} without storage_reader=shard_reader(...)")
    return found


def test_only_the_one_reader_loads_pickles() -> None:
    """grep's promise, kept by the AST: torch.load and unpickling live in speechtrain/ckptio.py only."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != READER:
            found += unsafe_reads(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "read checkpoints with speechtrain.ckptio (or train.checkpoint.safe_load):\n" + "\n".join(found)
    assert unsafe_reads(READER.read_text(encoding="utf-8")), "the reader itself must be what the scan recognises"


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nx = torch.load(p)",
        "import torch as t\nx = t.load(p)",  # an alias: torch's own name is not needed
        "from torch import load\nx = load(p)",
        "import torch\nf = getattr(torch, 'load')",
        "import pickle\nx = pickle.loads(b)",
        "import _pickle",
        "from pickle import Unpickler",
        "import dill",
        "import torch\nx = torch.serialization.load(p)",
        "x = ckptio.load(p, weights_only=False)",
        "x = load(p, weights_only=flag)",
        "import numpy as np\nx = np.load(p, allow_pickle=True)",
        "import pandas as pd\nx = pd.read_pickle(p)",
        "import torch.distributed.checkpoint as dcp\ndcp.load(sd, checkpoint_id=p)",
        "from torch.distributed import checkpoint\ncheckpoint.load(sd)",
    ],
)
def test_the_scan_finds_each_way_to_unpickle(source: str) -> None:
    assert unsafe_reads(source), source


def test_the_scan_passes_the_safe_reads() -> None:
    safe = (
        "from speechtrain import ckptio\nx = ckptio.load(p)\n"
        "import numpy as np\ny = np.load(p, mmap_mode='r')\nz = np.load(p, allow_pickle=False)\n"
        "import torch.distributed.checkpoint as dcp\ndcp.load(sd, storage_reader=shard_reader(f), no_dist=True)\n"
    )
    assert unsafe_reads(safe) == []


# ------------------------------------------------------------------------------------------- the reader
class _Payload:
    """Unpickled, it opens (creates) its marker file: code a checkpoint ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (builtins.open, (str(self.marker), "w"))


def poison(path: Path, marker: Path, step: int = 99) -> None:
    """Write a checkpoint at ``path`` that looks like ours (marker, step) and carries a payload."""
    from speechtrain.train import checkpoint as ckpt

    torch.save({ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION, "step": step, "modules": {}, "x": _Payload(marker)}, path)


def test_the_reader_refuses_a_payload_unless_trusted(tmp_path: Path) -> None:
    from speechtrain import ckptio

    marker, path = tmp_path / "ran", tmp_path / "evil.pt"
    poison(path, marker)
    with pytest.raises(ckptio.PickledObjects, match=r"evil.pt: refused: .* \(GLOBAL io.open\)$"):
        ckptio.load(path)
    with pytest.raises(ckptio.PickledObjects):
        ckptio.load(path, mmap=True)
    assert not marker.exists()
    ckptio.load(path, trust_pickle=True)  # the user's explicit trust for this file
    assert marker.exists()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ckptio.Unreadable, match="junk.pt: not a readable torch file"):
        ckptio.load(tmp_path / "junk.pt")
    assert issubclass(ckptio.PickledObjects, CheckpointError) and issubclass(ckptio.Unreadable, CheckpointError)


def test_every_loader_of_the_package_refuses_the_payload(tmp_path: Path) -> None:
    """safe_load (resume, inference, export, consolidate), the importers (init_from) and XTTS's base weights."""
    from speechtrain.models.importing import read_checkpoint
    from speechtrain.models.xtts.checkpoint import _read_file
    from speechtrain.train.checkpoint import safe_load

    marker, path = tmp_path / "ran", tmp_path / "evil.pt"
    poison(path, marker)
    with pytest.raises(CheckpointError, match="refused"):
        safe_load(path)
    with pytest.raises(CheckpointError, match="train.init_trust_pickle=true"):
        read_checkpoint(path)
    with pytest.raises(Exception, match="refused"):
        _read_file(path)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------- export
#: the export formats and the family each is tried with (consolidate: any family; --format: the family's own)
EXPORTS = {
    "piper": "vits",
    "onnx": "hifigan",
    "jik876": "hifigan",
    "singingvocoders": "nsf_hifigan",
    "coqui": "xtts",
    "consolidate": "hifigan",
}
RECIPE = {
    "vits": ("vits_tiny.yaml", "demo"),
    "hifigan": ("vocoder_hifigan_tiny.yaml", "demo"),
    "nsf_hifigan": ("vocoder_nsf_hifigan_tiny.yaml", "singing"),
    "xtts": ("xtts_finetune_tiny.yaml", "demo"),
}


@pytest.fixture(scope="module")
def poisoned_run(
    tmp_path_factory: pytest.TempPathFactory, demo_data: list[str], singing_data: list[str]
) -> Callable[[str], tuple[Path, Path]]:
    """A family's tiny run (2 steps, a checkpoint at each) whose best.pt is replaced by one carrying a payload
    (step 99); made once per family for this module. Returns the run directory and the payload's marker."""
    from speechtrain.cli.main import main

    root = tmp_path_factory.mktemp("poisoned")
    made: dict[str, tuple[Path, Path]] = {}

    def run(family: str) -> tuple[Path, Path]:
        if family not in made:
            recipe, corpus = RECIPE[family]
            args = ["--config", str(RECIPES / recipe), *(demo_data if corpus == "demo" else singing_data), *TINY]
            if family == "xtts":  # a random tiny base, written once
                from speechtrain.config import load_config
                from speechtrain.recipes.common import build_task

                args += ["model.language=en", f"model.checkpoint_dir={root / 'xtts_base'}"]
                build_task(load_config(RECIPES / recipe, args[2:]))
            if family == "vits":  # bound for Piper: trained on Piper's own phoneme ids (issue 39)
                args += ["data.phonemizer=piper", "model.add_blank=false", "data.language=en"]
            path = root / family
            assert main(["train", *args, *steps(2), "train.save_every=1", f"train.output_dir={path}"]) == 0
            assert (path / "checkpoints" / "step_00000002.pt").is_file()
            marker = root / f"{family}.ran"
            poison(path / "best.pt", marker)
            made[family] = (path, marker)
        return made[family]

    return run


def _read(path: Path) -> Any:
    """A file the export wrote (tensors only, as users read it)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _exported_step(fmt: str, out: Path) -> int | None:
    """The training step an export records (None where its format records none)."""
    import json

    if fmt == "piper":
        return int(json.loads(next(out.glob("*.onnx.json")).read_text())["speechtrain"]["step"])
    if fmt == "onnx":
        return int(json.loads((out / "config.json").read_text())["step"])
    if fmt == "jik876":
        return int(next(out.glob("g_*")).name[2:])
    if fmt == "consolidate":
        return int(_read(out / "model.pt")["step"])
    return None


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("fmt", list(EXPORTS))
def test_export_never_runs_a_payload_in_best_pt(
    fmt: str, poisoned_run: Callable[[str], tuple[Path, Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """best.pt carries a payload, the step checkpoints are intact: the export skips best.pt (saying so), exports
    the newest step, never runs the payload, and records step 2 (the exported weights'), not best.pt's 99."""
    from speechtrain.cli.main import main

    run, marker = poisoned_run(EXPORTS[fmt])
    marker.unlink(missing_ok=True)  # each export judged alone (a family's run serves several formats)
    out = tmp_path / "out"
    argv = ["export", str(run), str(out), "--consolidate" if fmt == "consolidate" else f"--format={fmt}"]
    code = main(argv)
    printed = capsys.readouterr()
    assert not marker.exists(), f"the payload in best.pt ran during `speechtrain {' '.join(argv)}`"
    assert code == 0, printed.err[-3000:]
    assert "skipping" in printed.err and "best.pt: refused" in printed.err
    recorded = _exported_step(fmt, out)
    assert recorded in (None, 2), f"the export records step {recorded}; its weights are step 2's"
    if fmt == "consolidate":
        assert _read(out / "model.pt")["consolidated_from"] == "step_00000002.pt"


# ------------------------------------------------------------------------------------------- export temporaries
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_next_export_removes_stale_temporaries_and_keeps_a_live_ones(
    tmp_path: Path, live_pid: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill -9 during an export leaves ``.OUT.export-tmp-PID/``: the next export to OUT removes it (saying so)
    when process PID is gone, and keeps it while PID runs (an export in progress)."""
    from speechtrain.recipes.export import write_folder

    out = tmp_path / "voice"
    dead = _dead_pid()
    stale = tmp_path / f".voice.export-tmp-{dead}"
    (stale / "sub").mkdir(parents=True)
    (stale / "model.onnx").write_bytes(b"x" * 1024)
    live = tmp_path / f".voice.export-tmp-{live_pid}"
    live.mkdir()
    other = tmp_path / f".other.export-tmp-{dead}"  # another target's: not this export's to judge
    other.mkdir()
    with caplog.at_level("INFO", logger="speechtrain"):
        write_folder(out, lambda folder: (folder / "model.onnx").write_bytes(b"new"))
    assert (out / "model.onnx").read_bytes() == b"new"
    assert not stale.exists(), "the stale temporary of a dead export was left behind"
    assert live.is_dir() and other.is_dir()
    said = [r.getMessage() for r in caplog.records if "export-tmp" in r.getMessage()]
    assert len(said) == 1 and str(stale) in said[0] and str(dead) in said[0], said


def test_a_stale_temporary_is_removed_when_the_export_fails_too(tmp_path: Path) -> None:
    from speechtrain.errors import UserError
    from speechtrain.recipes.export import write_folder

    stale = tmp_path / f".voice.export-tmp-{_dead_pid()}"
    stale.mkdir()

    def fail(folder: Path) -> None:
        raise UserError("check failed")

    with pytest.raises(UserError):
        write_folder(tmp_path / "voice", fail)
    assert not stale.exists()
    assert not list(tmp_path.glob(f".voice.export-tmp-{os.getpid()}")), "its own temporary is gone as well"
