"""What every export shares: the optional packages (imported on use, with the install hint), the ONNX
writer, the runtime session, the checks and the result they make, and the one place files are written.

An export is not done when its files are written: it runs what it wrote in the runtime that will run it
(onnxruntime, ``piper-tts``, a reloaded checkpoint) on fixed inputs of two lengths beside the PyTorch
model and records the largest difference in an :class:`ExportCheck`; one above its tolerance makes the
export fail (:class:`ExportCheckFailed`, exit 2) with the files left in place for inspection.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn

from speechtrain.errors import UserError

INSTALL_HINT = "pip install 'speechtrain[export]'  (onnx, onnxruntime and piper-tts)"
#: ONNX opset of every graph we write: what Piper's and DiffSinger's own exporters use, so that the
#: onnxruntime builds inside Piper, sherpa-onnx and OpenUtau load them
OPSET = 15
#: largest |difference| accepted between the runtime and PyTorch, on audio in [-1, 1] and on class
#: probabilities (float32 kernels differ in summation order: seen 1e-7 .. 1e-5 on the tiny models)
AUDIO_TOLERANCE = 1e-4
#: a Piper WAV holds 16-bit samples of the peak-normalised audio: half a step of 1/32767 is the rounding
WAV_TOLERANCE = 2e-4


class ExportCheckFailed(UserError):
    """An exported model disagrees with the PyTorch model beyond the stated tolerance."""


def require(module: str, what: str = "speechtrain export") -> ModuleType:
    """Import an optional package of the ``export`` extra, or a UserError with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        package = {"piper": "piper-tts"}.get(module.split(".")[0], module.split(".")[0])
        raise UserError(f"{what} needs the {package} package: {INSTALL_HINT}") from None


@dataclass
class ExportCheck:
    """One comparison of the exported model in its runtime with the PyTorch model."""

    name: str  # what was compared, e.g. "onnxruntime vs PyTorch, 41 tokens"
    max_diff: float  # largest |runtime - PyTorch| (inf when the shapes differ)
    tolerance: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.max_diff)) and self.max_diff <= self.tolerance

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        extra = f" ({self.detail})" if self.detail else ""
        return f"check {verdict}: {self.name}: max |diff| {self.max_diff:.3g} (tolerance {self.tolerance:g}){extra}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_diff": self.max_diff, "tolerance": self.tolerance, "ok": self.ok}


@dataclass
class ExportResult:
    """What an export wrote and what its checks found."""

    format: str
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    checks: list[ExportCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def lines(self) -> list[str]:
        out = [f"wrote {p}" for p in self.files]
        out += [c.line() for c in self.checks]
        out += [f"note: {n}" for n in self.notes]
        return out

    def raise_if_failed(self) -> None:
        bad = [c for c in self.checks if not c.ok]
        if bad:
            raise ExportCheckFailed(
                f"--format {self.format}: the exported model differs from the PyTorch model: "
                + "; ".join(c.line() for c in bad)
                + f" (files left in {self.out_dir} for inspection)"
            )


class ExportFiles:
    """The one writer of an export's files (so that writing them atomically is one change, here)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise UserError(f"{self.out_dir}: exists and is not a folder; give an output folder")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.written: list[Path] = []

    def path(self, name: str) -> Path:
        """Where file ``name`` goes (recorded as written by the caller's next write)."""
        return self.out_dir / name

    def _record(self, path: Path) -> Path:
        if path not in self.written:
            self.written.append(path)
        return path

    def write_text(self, name: str, text: str) -> Path:
        path = self.path(name)
        path.write_text(text, encoding="utf-8")
        return self._record(path)

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")

    def write_yaml(self, name: str, obj: Any) -> Path:
        import yaml

        return self.write_text(name, yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))

    def write_torch(self, name: str, obj: Any) -> Path:
        path = self.path(name)
        torch.save(obj, path)
        return self._record(path)

    def write_onnx(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        input_names: Sequence[str],
        output_names: Sequence[str],
        dynamic_axes: Mapping[str, Mapping[int, str]],
    ) -> Path:
        """Trace ``module`` on ``args`` into an ONNX graph (opset :data:`OPSET`) and check it with onnx's checker.

        torch's TorchScript-based exporter is used (``dynamo=False``), as Piper's and DiffSinger's own
        exporters do: it keeps the lengths symbolic through the VITS duration expansion, which
        torch.export cannot (data-dependent output shapes)."""
        onnx = require("onnx")
        path = self.path(name)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings: the checks below are the verdict
            torch.onnx.export(
                module,
                args,
                str(path),
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_axes={k: dict(v) for k, v in dynamic_axes.items()},
                opset_version=OPSET,
                dynamo=False,
            )
        onnx.checker.check_model(str(path))
        return self._record(path)


def ort_session(path: str | Path | bytes, threads: int | None = None) -> Any:
    """An onnxruntime CPU session of an ONNX file (or of a serialized model); ``threads``: intra-op threads."""
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    if threads:
        options.intra_op_num_threads = int(threads)
    source = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])


def max_abs_diff(a: Any, b: Any) -> tuple[float, str]:
    """Largest |a - b| of two arrays of one shape (after squeezing), or inf and the shapes that differ."""
    x, y = np.asarray(a, dtype=np.float64).squeeze(), np.asarray(b, dtype=np.float64).squeeze()
    if x.shape != y.shape:
        return float("inf"), f"shapes differ: {x.shape} vs {y.shape}"
    if x.size == 0:
        return 0.0, "empty"
    return float(np.max(np.abs(x - y))), f"{x.size} values, peak {float(np.max(np.abs(y))):.3g}"


def compare(name: str, runtime: Any, reference: Any, tolerance: float) -> ExportCheck:
    """An :class:`ExportCheck` of a runtime's output against the PyTorch reference."""
    diff, detail = max_abs_diff(runtime, reference)
    return ExportCheck(name, diff, tolerance, detail)


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (CPU when it has none)."""
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


RANDOM_LIKE = ("RandomNormalLike", "RandomUniformLike")
RANDOM_SHAPED = ("RandomNormal", "RandomUniform")


def without_random_nodes(path: str | Path) -> tuple[bytes, int]:
    """The ONNX model at ``path`` with every random node replaced by zeros of its shape (for a check of the
    deterministic part against PyTorch with its noise off); returns the serialized model and the count."""
    onnx = require("onnx")
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    nodes, replaced = [], 0
    for node in model.graph.node:
        if node.op_type in RANDOM_LIKE:
            nodes.append(helper.make_node("Sub", [node.input[0], node.input[0]], list(node.output)))
        elif node.op_type in RANDOM_SHAPED:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            dtype = helper.tensor_dtype_to_np_dtype(int(attrs.get("dtype", onnx.TensorProto.FLOAT)))
            zeros = numpy_helper.from_array(np.zeros(list(attrs["shape"]), dtype=dtype))
            nodes.append(helper.make_node("Constant", [], list(node.output), value=zeros))
        else:
            nodes.append(node)
            continue
        replaced += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model.SerializeToString(), replaced
