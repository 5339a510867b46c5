"""Coqui XTTS-v2 checkpoint folders: read, load with every tensor accounted for, write back bit for bit.

A folder holds ``model.pth`` (``{"model": state_dict}`` of Coqui's ``Xtts``: ``mel_stats``, ``gpt.*``,
``hifigan_decoder.*``), ``dvae.pth`` (the DVAE's state dict), ``mel_stats.pth`` (80 per-band mel norms),
``vocab.json`` (a ``tokenizers`` BPE file) and ``config.json`` (Coqui's ``XttsConfig``). Every file is read
by :func:`speechtrain.ckptio.load` (tensors and plain containers only).

Every tensor of a file is classified:

- **loaded**: it maps to a parameter or buffer of our modules (weight norm saved as ``weight_g``/``weight_v``
  by torch's older API or as ``parametrizations.weight.original0/1`` by the newer one; both map);
- **alias**: a second name of a loaded tensor that some Coqui versions save (``gpt.gpt_inference.*``,
  ``gpt.gpt.wte.weight``, left by ``init_gpt_for_inference``); checked equal to its source;
- **constant**: HuggingFace GPT-2's causal-mask buffers ``attn.bias``/``attn.masked_bias`` of older
  ``transformers`` versions; checked and regenerated;
- **kept**: trainer-only tensors of a Coqui ``GPTTrainer`` checkpoint (its copy of the DVAE and mel
  filterbanks), and (with ``strict=False``) unexpected ones: not used, written back unchanged;
- **missing** / **unexpected** / **shape mismatch**: reported; with ``strict`` an error.

The key layout (order, names, dtypes, what each key is) is stored with the model (``CoquiState``), so an
export writes the same keys in the same order and a loaded-then-exported folder has the same tensors.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from speechtrain import ckptio
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.models.xtts.config import COQUI_ARCH_KEYS, XttsArch
from speechtrain.models.xtts.dvae import DiscreteVAE
from speechtrain.models.xtts.gpt import XttsGPT
from speechtrain.models.xtts.hifigan import HifiDecoder
from speechtrain.models.xtts.tokenizer import XttsTokenizer, language_tag

log = get_logger(__name__)

FILES = ("model.pth", "dvae.pth", "mel_stats.pth", "vocab.json", "config.json")
_WN = {".weight_g": ".parametrizations.weight.original0", ".weight_v": ".parametrizations.weight.original1"}
_MASK = re.compile(r"^gpt\.(gpt|gpt_inference\.transformer)\.h\.\d+\.attn\.(bias|masked_bias)$")
_TRAINER_ONLY = ("dvae.", "torch_mel_spectrogram_dvae.", "torch_mel_spectrogram_style_encoder.")
_ALIASES = (
    ("gpt.gpt_inference.transformer.", "gpt.gpt."),
    ("gpt.gpt_inference.pos_embedding.", "gpt.mel_pos_embedding."),
    ("gpt.gpt_inference.embeddings.", "gpt.mel_embedding."),
    ("gpt.gpt_inference.final_norm.", "gpt.final_norm."),
    ("gpt.gpt_inference.lm_head.0.", "gpt.final_norm."),
    ("gpt.gpt_inference.lm_head.1.", "gpt.mel_head."),
    ("gpt.gpt.wte.", "gpt.mel_embedding."),
)


class CoquiState(nn.Module):
    """No parameters: the mel statistics and what an export needs (vocabulary, config.json, key layout).

    Buffers ``mel_stats`` (model.pth's, used for the conditioning mel at synthesis, as Coqui does) and
    ``mel_norms`` (mel_stats.pth, used for the DVAE and conditioning mels in training, as Coqui's trainer
    does). The rest travels in ``get_extra_state``: plain strings, lists and tensors (weights_only-safe)."""

    mel_stats: torch.Tensor
    mel_norms: torch.Tensor

    def __init__(self, n_mels: int = 80) -> None:
        super().__init__()
        self.register_buffer("mel_stats", torch.ones(n_mels))
        self.register_buffer("mel_norms", torch.ones(n_mels))
        self.vocab_json = ""  # the run's vocabulary (extended for a new language)
        self.base_vocab_json = ""  # the checkpoint's, before any extension
        self.config_json = "{}"
        self.layout: dict[str, list[list[Any]]] = {}  # file -> [[key, kind, ref, dtype], ...]
        self.kept: dict[str, torch.Tensor] = {}  # "file:key" -> tensor written back unchanged
        self.added_tokens: list[str] = []
        self.source_dir = ""

    def train(self, mode: bool = True) -> CoquiState:
        return super().train(False)

    def get_extra_state(self) -> dict[str, Any]:
        return {
            "vocab_json": self.vocab_json,
            "base_vocab_json": self.base_vocab_json,
            "config_json": self.config_json,
            "layout": self.layout,
            "kept": self.kept,
            "added_tokens": list(self.added_tokens),
            "source_dir": self.source_dir,
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.vocab_json = state["vocab_json"]
        self.base_vocab_json = state["base_vocab_json"]
        self.config_json = state["config_json"]
        self.layout = state["layout"]
        self.kept = dict(state["kept"])
        self.added_tokens = list(state["added_tokens"])
        self.source_dir = state["source_dir"]

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_json)


@dataclass
class XttsModules:
    """The four modules of an XTTS model, by the names the task and checkpoints use."""

    gpt: XttsGPT
    hifigan_decoder: HifiDecoder
    dvae: DiscreteVAE
    coqui: CoquiState

    def by_name(self) -> dict[str, nn.Module]:
        return {"gpt": self.gpt, "hifigan_decoder": self.hifigan_decoder, "dvae": self.dvae, "coqui": self.coqui}


def build_dvae(arch: XttsArch) -> DiscreteVAE:
    """The DVAE at ``arch``'s sizes (randomly initialised)."""
    return DiscreteVAE(
        arch.n_mels,
        arch.num_codes,
        arch.dvae_codebook_dim,
        arch.dvae_hidden_dim,
        arch.dvae_num_layers,
        arch.dvae_num_resnet_blocks,
        arch.dvae_kernel_size,
    )


def build_modules(arch: XttsArch, dropout: float = 0.1, init: bool = True) -> XttsModules:
    """Modules of ``arch``, randomly initialised; ``init=False``: uninitialised memory, for a strict load
    that overwrites every tensor (at XTTS-v2 size the random init is 15 s of CPU time thrown away)."""

    def make() -> XttsModules:
        return XttsModules(XttsGPT(arch, dropout), HifiDecoder(arch), build_dvae(arch), CoquiState(arch.n_mels))

    if init:
        return make()
    with torch.device("meta"):
        mods = make()
    for module in mods.by_name().values():
        module.to_empty(device="cpu")
    return mods


# ------------------------------------------------------------------------------------------ reading
@dataclass
class CoquiFiles:
    """The light part of a checkpoint folder: its config, vocabulary and the sizes they give."""

    directory: Path
    config: dict[str, Any]
    config_json: str
    vocab_json: str
    tokenizer: XttsTokenizer
    arch: XttsArch


def read_config_and_vocab(directory: str | Path) -> CoquiFiles:
    """Read ``config.json`` and ``vocab.json`` and derive the sizes (UserError for a foreign folder)."""
    d = Path(directory)
    if not d.is_dir():
        raise UserError(f"model.checkpoint_dir: {d} is not a folder (a Coqui XTTS-v2 checkpoint folder holds {FILES})")
    absent = [f for f in FILES if not (d / f).is_file()]
    if absent:
        raise UserError(
            f"{d} is not a complete Coqui XTTS-v2 checkpoint folder: no {', '.join(absent)} "
            f"(download XTTS-v2, or set model.random_checkpoint=tiny for a rehearsal with random weights)"
        )
    config_json = (d / "config.json").read_text(encoding="utf-8")
    try:
        config = json.loads(config_json)
    except json.JSONDecodeError as exc:
        raise UserError(f"{d / 'config.json'}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(config, dict) or config.get("model") != "xtts" or not isinstance(config.get("model_args"), dict):
        raise UserError(f'{d / "config.json"}: not an XTTS config (needs "model": "xtts" and "model_args")')
    tokenizer = XttsTokenizer.from_file(d / "vocab.json")
    return CoquiFiles(d, config, config_json, tokenizer.json, tokenizer, arch_from_config(config, tokenizer, d))


def arch_from_config(config: dict[str, Any], tokenizer: XttsTokenizer, directory: Path) -> XttsArch:
    """Sizes from Coqui's config.json; the text-token count and start/stop ids from the vocabulary, as
    Coqui's ``Xtts.init_models`` takes them."""
    args = config["model_args"]
    values = {k: args[k] for k in COQUI_ARCH_KEYS if args.get(k) is not None}
    values.update(config.get("speechtrain_arch") or {})
    values["gpt_number_text_tokens"] = tokenizer.num_tokens
    values["gpt_start_text_token"] = tokenizer.start_id
    values["gpt_stop_text_token"] = tokenizer.stop_id
    try:
        return XttsArch(**values)
    except Exception as exc:  # noqa: BLE001 - pydantic ValidationError
        raise UserError(f"{directory / 'config.json'}: unusable XTTS sizes: {exc}") from None


def _read_file(path: Path) -> Any:
    try:
        return ckptio.load(path, mmap=True)  # tensors and plain containers only
    except ckptio.PickledObjects as exc:
        raise UserError(
            f"{path}: refused: it holds Python objects other than tensors and plain containers, which could run "
            f"code when loaded ({exc.detail}); re-save it as a plain state dict"
        ) from None
    except ckptio.Unreadable as exc:
        raise UserError(f"{path}: not a readable torch file ({exc.detail}; or another kind of file)") from None


def _state_dict_of(obj: Any, path: Path, container: str | None) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The state dict inside a loaded file and the other top-level entries (ignored: optimizer, config ...)."""
    if isinstance(obj, dict) and container and isinstance(obj.get(container), dict):
        sd, other = obj[container], [k for k in obj if k != container]
    elif isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        sd, other = obj, []
    else:
        what = f"a dict with '{container}'" if container else "a state dict"
        raise UserError(f"{path}: not an XTTS checkpoint file (expected {what} of tensors)")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise UserError(f"{path}: entries that are not tensors: {', '.join(map(str, bad[:5]))}")
    return sd, [str(k) for k in other]


# ------------------------------------------------------------------------------------------ reports
@dataclass
class FileReport:
    """What happened to the tensors of one file."""

    file: str
    tensors: int = 0
    loaded: int = 0
    aliases: int = 0
    constants: int = 0
    kept: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    ignored_entries: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def unaccounted(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.mismatched)

    def lines(self) -> list[str]:
        head = f"{self.file}: {self.tensors} tensors: {self.loaded} loaded"
        if self.aliases:
            head += f", {self.aliases} aliases (checked equal to their source)"
        if self.constants:
            head += f", {self.constants} causal-mask constants (checked)"
        if self.kept:
            head += f", {len(self.kept)} kept unchanged"
        out = [head]
        for title, keys in (
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("shape mismatch", self.mismatched),
        ):
            if keys:
                shown = ", ".join(keys[:8]) + (f" ... (+{len(keys) - 8})" if len(keys) > 8 else "")
                out.append(f"  {title} ({len(keys)}): {shown}")
        if self.ignored_entries:
            out.append(f"  ignored top-level entries (not model tensors): {', '.join(self.ignored_entries)}")
        out += [f"  note: {n}" for n in self.notes]
        return out


@dataclass
class LoadReport:
    """The per-file reports of one checkpoint folder."""

    directory: str
    files: list[FileReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def unaccounted(self) -> int:
        """Tensors missing, unexpected or of another shape, over all files (0: everything accounted for)."""
        return sum(f.unaccounted for f in self.files)

    @property
    def ok(self) -> bool:
        return self.unaccounted == 0

    def file(self, name: str) -> FileReport:
        return next(f for f in self.files if f.file == name)

    def summary(self) -> str:
        lines = [
            f"XTTS checkpoint {self.directory}: "
            + ("every tensor accounted for" if self.ok else f"{self.unaccounted} tensors unaccounted for")
        ]
        for f in self.files:
            lines += ["  " + line for line in f.lines()]
        lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ loading
def _canonical(key: str) -> str:
    for old, new in _WN.items():
        if key.endswith(old):
            return key[: -len(old)] + new
    return key


def _alias_source(key: str) -> str | None:
    for old, new in _ALIASES:
        if key.startswith(old):
            target = new + key[len(old) :]
            return _alias_source(target) or target
    return None


def _model_targets(mods: XttsModules) -> dict[str, tuple[nn.Module, str]]:
    """Canonical model.pth key -> (module, key in its state dict)."""
    out: dict[str, tuple[nn.Module, str]] = {"mel_stats": (mods.coqui, "mel_stats")}
    for prefix, module in (("gpt.", mods.gpt), ("hifigan_decoder.", mods.hifigan_decoder)):
        for k in module.state_dict():
            out[prefix + k] = (module, k)
    return out


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _load_tensors(
    report: FileReport, sd: dict[str, torch.Tensor], targets: dict[str, tuple[nn.Module, str]], file: str
) -> tuple[
    dict[nn.Module, dict[str, torch.Tensor]],
    list[list[Any]],
    dict[str, torch.Tensor],
    list[tuple[str, str, torch.Tensor]],
]:
    """Classify the tensors of one file. Returns tensors per module, the layout, kept tensors (copied out of
    the memory-mapped file) and the aliases to check after loading."""
    per_module: dict[nn.Module, dict[str, torch.Tensor]] = {}
    layout: list[list[Any]] = []
    kept: dict[str, torch.Tensor] = {}
    aliases: list[tuple[str, str, torch.Tensor]] = []
    modules = {id(m): m for m, _ in targets.values()}
    states = {key: m.state_dict() for key, m in modules.items()}  # once per module, not per tensor
    seen: set[str] = set()
    report.tensors = len(sd)
    for key, tensor in sd.items():
        prefix = "xtts." if key.startswith("xtts.") else ""
        canon = _canonical(key[len(prefix) :])
        dtype = str(tensor.dtype).replace("torch.", "")
        if canon in targets:
            module, mkey = targets[canon]
            want = states[id(module)][mkey]
            layout.append([key, "param", prefix + canon, dtype])
            seen.add(canon)
            if tuple(want.shape) != tuple(tensor.shape):
                report.mismatched.append(f"{key}: file {_shape(tensor)}, model {_shape(want)}")
                continue
            per_module.setdefault(module, {})[mkey] = tensor
            report.loaded += 1
        elif file == "model.pth" and (source := _alias_source(canon)) is not None and source in targets:
            aliases.append((key, source, tensor))
            layout.append([key, "alias", prefix + source, dtype])
            report.aliases += 1
        elif file == "model.pth" and _MASK.match(canon) and _constant_ok(canon, tensor):
            layout.append([key, "constant", _constant_recipe(canon, tensor), dtype])
            report.constants += 1
        else:
            if file == "model.pth" and key.startswith(_TRAINER_ONLY):
                report.kept.append(key)
            else:
                report.unexpected.append(key)
            kept[f"{file}:{key}"] = tensor.clone()
            layout.append([key, "kept", None, dtype])
    report.missing = [c for c in targets if c not in seen]
    if report.kept:
        report.notes.append(
            f"{len(report.kept)} trainer-only tensors (a Coqui GPTTrainer checkpoint's DVAE copy and mel filterbanks) "
            "are not used and are written back unchanged"
        )
    return per_module, layout, kept, aliases


def _constant_recipe(key: str, tensor: torch.Tensor) -> Any:
    if key.endswith("masked_bias"):
        return float(tensor.item())
    return int(tensor.shape[-1])


def _constant_ok(key: str, tensor: torch.Tensor) -> bool:
    if key.endswith("masked_bias"):
        return tensor.dim() == 0
    n = tensor.shape[-1]
    return tensor.dim() == 4 and bool(torch.equal(tensor, _causal_mask(n, tensor.dtype)))


def _causal_mask(n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.tril(torch.ones(n, n, dtype=torch.uint8)).to(dtype).view(1, 1, n, n)


def load_coqui_weights(directory: str | Path, mods: XttsModules, strict: bool = True) -> LoadReport:
    """Load a Coqui XTTS-v2 folder's tensors into ``mods`` (built with the folder's sizes) and record its
    layout in ``mods.coqui``. With ``strict``, any missing, unexpected or mismatched tensor is a UserError
    carrying the whole report; otherwise the report is logged and returned."""
    files = read_config_and_vocab(directory)
    d = files.directory
    report = LoadReport(str(d))
    layout: dict[str, list[list[Any]]] = {}
    kept: dict[str, torch.Tensor] = {}
    loads: list[tuple[nn.Module, dict[str, torch.Tensor]]] = []
    alias_checks: list[tuple[FileReport, str, str, torch.Tensor]] = []

    model_targets = _model_targets(mods)
    rows = files.arch.gpt_number_text_tokens
    if mods.gpt.text_embedding.num_embeddings != rows:
        mods.gpt.resize_text_vocab(rows)  # back to the folder's vocabulary (setup may run twice)
    dvae_targets: dict[str, tuple[nn.Module, str]] = {k: (mods.dvae, k) for k in mods.dvae.state_dict()}
    for file, container, targets in (("model.pth", "model", model_targets), ("dvae.pth", "model", dvae_targets)):
        fr = FileReport(file)
        sd, fr.ignored_entries = _state_dict_of(_read_file(d / file), d / file, container)
        per_module, layout[file], file_kept, aliases = _load_tensors(fr, sd, targets, file)
        kept.update(file_kept)
        loads += list(per_module.items())
        alias_checks += [(fr, *a) for a in aliases]
        report.files.append(fr)

    fr = FileReport("mel_stats.pth")
    stats = _read_file(d / "mel_stats.pth")
    fr.tensors = 1
    if not isinstance(stats, torch.Tensor):
        raise UserError(f"{d / 'mel_stats.pth'}: expected one tensor of {mods.coqui.mel_norms.numel()} mel norms")
    if tuple(stats.shape) != tuple(mods.coqui.mel_norms.shape):
        fr.mismatched.append(f"mel_stats.pth: file {_shape(stats)}, model {_shape(mods.coqui.mel_norms)}")
    else:
        loads.append((mods.coqui, {"mel_norms": stats}))
        fr.loaded = 1
    layout["mel_stats.pth"] = [["", "param", "mel_norms", str(stats.dtype).replace("torch.", "")]]
    report.files.append(fr)

    if not report.ok and strict:
        raise UserError(
            report.summary() + "\nthe folder does not match an XTTS-v2 model of its config.json sizes; fix the "
            "folder, or set model.strict_load=false to load what matches (missing tensors keep their init)"
        )
    for module, tensors in loads:
        result = module.load_state_dict(tensors, strict=False)
        assert not result.unexpected_keys, result.unexpected_keys  # the keys came from the module itself
    states = {id(m): m.state_dict() for m in mods.by_name().values()}
    for fr, key, source, tensor in alias_checks:
        module, mkey = model_targets[source.removeprefix("xtts.")]
        if not torch.equal(states[id(module)][mkey].to(tensor.dtype), tensor):
            fr.notes.append(f"{key} differs from {source}; {source} is used, the export writes the source again")
    c = mods.coqui
    c.vocab_json = c.base_vocab_json = files.vocab_json
    c.config_json = files.config_json
    c.layout, c.kept, c.added_tokens, c.source_dir = layout, kept, [], str(d)
    tok = files.tokenizer
    report.notes.append(f"vocab.json: {tok.num_tokens} tokens, languages: {', '.join(tok.languages)}")
    if report.ok:
        log.info("%s", report.summary())
    else:
        log.warning("%s", report.summary())
    return report


def load_dvae(directory: str | Path, arch: XttsArch) -> tuple[DiscreteVAE, torch.Tensor]:
    """The frozen DVAE of a folder's ``dvae.pth`` and the mel norms of its ``mel_stats.pth`` (n_mels,) fp32,
    built at ``arch``'s sizes, every tensor accounted for (what ``prepare`` computes the codes with; the
    training path loads the same tensors through :func:`load_coqui_weights`)."""
    d = Path(directory)
    dvae = build_dvae(arch)
    fr = FileReport("dvae.pth")
    fix = f"put the dvae.pth and mel_stats.pth of this XTTS checkpoint (download them again) in {d}"
    try:
        sd, fr.ignored_entries = _state_dict_of(_read_file(d / "dvae.pth"), d / "dvae.pth", "model")
    except UserError as exc:
        raise UserError(f"{exc}; the DVAE codes are computed with it: {fix}") from None
    targets: dict[str, tuple[nn.Module, str]] = {k: (dvae, k) for k in dvae.state_dict()}
    per_module, _, _, _ = _load_tensors(fr, sd, targets, "dvae.pth")
    if fr.unaccounted:
        raise UserError(
            "\n".join(fr.lines()) + f"\n{d / 'dvae.pth'} is not the DVAE of {d / 'config.json'}'s sizes: put the "
            "dvae.pth of the same XTTS checkpoint in the folder (or point model.checkpoint_dir at a complete one)"
        )
    dvae.load_state_dict(per_module.get(dvae, {}), strict=True)
    try:
        stats = _read_file(d / "mel_stats.pth")
    except UserError as exc:
        raise UserError(f"{exc}; the DVAE mel is normalised with it: {fix}") from None
    if not isinstance(stats, torch.Tensor) or tuple(stats.shape) != (arch.n_mels,):
        raise UserError(f"{d / 'mel_stats.pth'}: expected one tensor of {arch.n_mels} mel norms; {fix}")
    return dvae, stats.to(torch.float32).clone()


# ------------------------------------------------------------------------------------------ exporting
def export_coqui(mods: XttsModules, out_dir: str | Path, language: str | None = None) -> Path:
    """Write ``mods`` as a Coqui XTTS-v2 folder: the layout it was loaded with (same keys, order, dtypes),
    current tensors, the run's vocabulary, config.json with the token count and languages updated."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    c = mods.coqui
    if not c.layout:
        raise UserError("this model was not loaded from a Coqui checkpoint folder, so it has no layout to export")
    targets = _model_targets(mods)
    dvae_targets: dict[str, tuple[nn.Module, str]] = {k: (mods.dvae, k) for k in mods.dvae.state_dict()}
    states = {id(m): m.state_dict() for m in (mods.gpt, mods.hifigan_decoder, mods.dvae, mods.coqui)}

    def tensor_of(canon: str, table: dict[str, tuple[nn.Module, str]]) -> torch.Tensor:
        module, key = table[canon]
        return states[id(module)][key]

    for file, table in (("model.pth", targets), ("dvae.pth", dvae_targets)):
        sd: dict[str, torch.Tensor] = {}
        cast: dict[tuple[str, str], torch.Tensor] = {}
        written: set[str] = set()
        for key, kind, ref, dtype in c.layout[file]:
            if kind in ("param", "alias"):
                canon = ref.removeprefix("xtts.")
                memo = (canon, dtype)
                if memo not in cast:  # one tensor per source, so aliases share storage as in the original;
                    # no copy when it is already a CPU tensor of that dtype (a real-size export stays light)
                    cast[memo] = tensor_of(canon, table).detach().to("cpu", getattr(torch, dtype))
                sd[key] = cast[memo]
                written.add(canon)
            elif kind == "constant":
                sd[key] = (
                    torch.tensor(ref, dtype=getattr(torch, dtype))
                    if key.endswith("masked_bias")
                    else _causal_mask(int(ref), getattr(torch, dtype))
                )
            else:
                sd[key] = c.kept[f"{file}:{key}"]
        prefix = "xtts." if any(k.startswith("xtts.") for k in sd) else ""
        for canon in table:  # tensors the folder lacked (strict_load=false): written under their own names
            if canon not in written:
                sd[prefix + canon if file == "model.pth" else canon] = tensor_of(canon, table).detach().cpu()
        torch.save({"model": sd} if file == "model.pth" else sd, out / file)
    (_, _, _, dtype), *_ = c.layout["mel_stats.pth"]
    torch.save(c.mel_norms.detach().to("cpu", getattr(torch, dtype)).clone(), out / "mel_stats.pth")
    (out / "vocab.json").write_text(c.vocab_json, encoding="utf-8")
    (out / "config.json").write_text(_updated_config(c, language), encoding="utf-8")
    return out


def _updated_config(c: CoquiState, language: str | None) -> str:
    if not c.added_tokens and (language is None or not _needs_language(c, language)):
        return c.config_json  # unchanged: byte for byte the original
    config = json.loads(c.config_json)
    tok = XttsTokenizer(c.vocab_json)
    args = config.setdefault("model_args", {})
    args["gpt_number_text_tokens"] = tok.num_tokens
    if args.get("gpt_start_text_token") is not None:
        args["gpt_start_text_token"] = tok.start_id
    if args.get("gpt_stop_text_token") is not None:
        args["gpt_stop_text_token"] = tok.stop_id
    languages = list(config.get("languages") or [])
    for tag in tok.languages:
        if tag not in languages:
            languages.append(tag)
    config["languages"] = languages
    return json.dumps(config, indent=4, ensure_ascii=False) + "\n"


def _needs_language(c: CoquiState, language: str) -> bool:
    return language_tag(language) not in (json.loads(c.config_json).get("languages") or [])
