"""The xtts family: Coqui XTTS-v2 layout and sizes, checkpoint load/export, vocabulary extension, training
step invariants, generation. Coqui's own classes are the reference for names, shapes and counts
(``tests/fixtures/xtts_v2_coqui_layout.json``, written by ``tests/fixtures/make_xtts_v2_layout.py``)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("tokenizers")

from speechtrain.errors import UserError  # noqa: E402
from speechtrain.models.xtts.build import write_random_checkpoint  # noqa: E402
from speechtrain.models.xtts.checkpoint import build_modules, export_coqui, load_coqui_weights  # noqa: E402
from speechtrain.models.xtts.config import arch_preset  # noqa: E402
from speechtrain.models.xtts.gpt import IGNORE_INDEX, SamplingSettings  # noqa: E402
from speechtrain.models.xtts.tokenizer import XttsTokenizer, expand_tokens  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LAYOUT = json.loads((Path(__file__).parent / "fixtures" / "xtts_v2_coqui_layout.json").read_text())


def _model_pth_layout(mods) -> list[list[object]]:  # noqa: ANN001
    rows: list[list[object]] = [["mel_stats", [80], "float32"]]
    for prefix, module in (("gpt.", mods.gpt), ("hifigan_decoder.", mods.hifigan_decoder)):
        for key, t in module.state_dict().items():
            rows.append([prefix + key, list(t.shape), str(t.dtype).removeprefix("torch.")])
    return rows


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_modules_at_xtts_v2_sizes_have_coquis_keys_shapes_and_parameter_count() -> None:
    with torch.device("meta"):  # no memory: names and shapes only
        mods = build_modules(arch_preset("xtts_v2"))
    assert _model_pth_layout(mods) == LAYOUT["model.pth"]  # same keys, order, shapes and dtypes
    dvae = [[k, list(t.shape), str(t.dtype).removeprefix("torch.")] for k, t in mods.dvae.state_dict().items()]
    assert dvae == LAYOUT["dvae.pth"]
    counts = LAYOUT["parameters"]
    assert _params(mods.gpt) + _params(mods.hifigan_decoder) == counts["model"] == 466_874_863
    assert _params(mods.gpt) == counts["gpt"]
    assert _params(mods.gpt.conditioning_encoder) == counts["gpt.conditioning_encoder"]
    assert _params(mods.gpt.conditioning_perceiver) == counts["gpt.conditioning_perceiver"]
    assert _params(mods.gpt.gpt) == counts["gpt.gpt"]
    assert _params(mods.hifigan_decoder) == counts["hifigan_decoder"]
    assert _params(mods.dvae) == counts["dvae"]


def test_tiny_coqui_preset_keeps_what_coqui_hard_codes_at_xtts_v2_size() -> None:
    """Coqui's Xtts builds the conditioning encoder, perceiver, HiFi-GAN decoder and speaker encoder at fixed
    sizes: a folder it can load (scripts/check_coqui_parity.py) must have them; only the GPT sizes of
    config.json and the DVAE (not in Xtts) may be small."""
    from speechtrain.models.xtts.config import COQUI_ARCH_KEYS, XttsArch

    tiny, full = arch_preset("tiny_coqui"), XttsArch()
    differ = {k for k in XttsArch.model_fields if getattr(tiny, k) != getattr(full, k)}
    assert differ and all(k in COQUI_ARCH_KEYS or k.startswith("dvae_") for k in differ), differ
    assert tiny.gpt_n_model_channels <= 64 and tiny.gpt_layers <= 2


TINY_COQUI = json.loads((Path(__file__).parent / "fixtures" / "xtts_tiny_coqui_layout.json").read_text())


def _export_note(mods, out: Path) -> str:  # noqa: ANN001
    """The note ``--format coqui`` gives for an export of ``mods``."""
    from types import SimpleNamespace

    from speechtrain.export import coqui
    from speechtrain.export.common import ExportResult

    task = SimpleNamespace(export=lambda d: export_coqui(mods, d))
    job = SimpleNamespace(task=task, files=SimpleNamespace(out_dir=out), result=lambda fmt: ExportResult(fmt, out))
    (note,) = coqui.export_coqui(job).notes  # type: ignore[arg-type]
    return note


def test_tiny_coqui_base_has_the_layout_coquis_xtts_builds_from_its_config(tmp_path: Path) -> None:
    """The contract without Coqui: every tensor of a tiny_coqui base's model.pth has the name, shape and dtype,
    in the order, that Coqui's own Xtts builds from that folder's config.json and vocab.json (recorded by
    ``bench/coqui_xtts_check.py --write-layout`` with coqui-tts 0.28.0, where Coqui's load_checkpoint(strict=True)
    took the folder), and config.json still gives Coqui the sizes it was built from."""
    from speechtrain import ckptio
    from speechtrain.models.xtts.checkpoint import _canonical

    folder = write_random_checkpoint(tmp_path / "base", "tiny_coqui", seed=0)
    args = json.loads((folder / "config.json").read_text())["model_args"]
    assert {k: args.get(k) for k in TINY_COQUI["model_args"]} == TINY_COQUI["model_args"]
    assert XttsTokenizer.from_file(folder / "vocab.json").num_tokens == TINY_COQUI["text_tokens"]
    sd = ckptio.load(folder / "model.pth", mmap=True)["model"]
    ours = [[_canonical(k), list(t.shape), str(t.dtype).removeprefix("torch.")] for k, t in sd.items()]
    assert ours == TINY_COQUI["model.pth"]
    del sd
    mods, report = _tiny_mods(folder)
    assert report.ok and _params(mods.gpt) + _params(mods.hifigan_decoder) == TINY_COQUI["parameters"]
    assert "load_checkpoint(strict=True)" in _export_note(mods, tmp_path / "out")


def test_a_tiny_preset_export_says_coqui_cannot_load_it(tmp_path: Path, tiny_folder: Path) -> None:
    """The ``tiny`` preset shrinks what Coqui hard-codes (122 tensors of other shapes and missing blocks in
    Coqui's strict load, coqui-tts 0.28.0): the coqui export says so and names the base that Coqui loads."""
    mods, _ = _tiny_mods(tiny_folder)
    note = _export_note(mods, tmp_path / "out")
    assert note.startswith("Coqui's Xtts cannot load this folder") and "speaker_layers" in note
    assert "tiny_coqui" in note


@pytest.mark.slow
def test_coquis_own_loader_takes_the_tiny_coqui_base_and_a_trained_export(tmp_path: Path) -> None:
    """Where a Python with coqui-tts is named (SPEECHTRAIN_COQUI_PYTHON), bench/coqui_xtts_check.py: Coqui's
    Xtts.load_checkpoint(strict=True) takes the tiny_coqui base and the --format coqui export of a run trained
    2 steps, and Coqui's modules compute what ours do (latents, CEs, speaker embedding, decoder audio); the
    layout Coqui builds is the recorded fixture."""
    import os
    import subprocess

    python = os.environ.get("SPEECHTRAIN_COQUI_PYTHON")
    if not python:
        pytest.skip(
            "SPEECHTRAIN_COQUI_PYTHON names no Python with coqui-tts (`python bench/peers/run.py --install` makes "
            "~/.cache/speechtrain-peers/venv/bin/python)"
        )
    script = Path(__file__).resolve().parents[1] / "bench" / "coqui_xtts_check.py"
    out, layout = tmp_path / "check.json", tmp_path / "layout.json"
    cmd = [python, str(script), "--work", str(tmp_path / "work"), "--steps", "2", "--json", str(out)]
    proc = subprocess.run(
        [*cmd, "--write-layout", str(layout)], capture_output=True, text=True, cwd=tmp_path, timeout=1200
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 10 and all(r["ok"] for r in rows), rows
    assert json.loads(layout.read_text())["model.pth"] == TINY_COQUI["model.pth"]


def _same_files(a: Path, b: Path) -> None:
    """Every tensor of every file equal bit for bit, same keys in the same order, same dtypes; JSON equal."""
    for name in ("model.pth", "dvae.pth"):
        x = torch.load(a / name, map_location="cpu", weights_only=True, mmap=True)
        y = torch.load(b / name, map_location="cpu", weights_only=True, mmap=True)
        x, y = x.get("model", x), y.get("model", y)
        assert list(x) == list(y), name
        for key in x:
            assert x[key].dtype == y[key].dtype and torch.equal(x[key], y[key]), f"{name}:{key}"
        del x, y
    assert torch.equal(torch.load(a / "mel_stats.pth"), torch.load(b / "mel_stats.pth"))
    for name in ("vocab.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.slow
def test_real_size_coqui_folder_loads_every_tensor_and_exports_bit_for_bit(tmp_path: Path) -> None:
    """XTTS-v2 at its real sizes, random weights: written in Coqui's layout (weight norm under its older
    names, as the release), loaded with nothing unaccounted for, exported back identical. One model in
    memory at a time (~2 GiB); the files are compared through memory maps."""
    src = write_random_checkpoint(tmp_path / "xtts_v2", "xtts_v2", seed=0)
    gc.collect()
    arch = arch_preset("xtts_v2").model_copy(update={"gpt_number_text_tokens": 6681})
    mods = build_modules(arch, init=False)  # a strict load overwrites every tensor
    report = load_coqui_weights(src, mods)
    assert report.ok and report.unaccounted == 0
    assert report.file("model.pth").loaded == len(LAYOUT["model.pth"]) == 963
    assert report.file("dvae.pth").loaded == len(LAYOUT["dvae.pth"]) == 56
    assert _params(mods.gpt) + _params(mods.hifigan_decoder) == LAYOUT["parameters"]["model"]
    out = export_coqui(mods, tmp_path / "exported")
    del mods
    gc.collect()
    _same_files(src, out)


# ---------------------------------------------------------------------------------------------- tiny
@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("xtts") / "tiny", "tiny", seed=0)


def _tiny_mods(folder: Path, strict: bool = True):  # noqa: ANN202
    from speechtrain.models.xtts.checkpoint import read_config_and_vocab

    mods = build_modules(read_config_and_vocab(folder).arch, dropout=0.0)
    return mods, load_coqui_weights(folder, mods, strict=strict)


def test_tiny_folder_round_trips_with_either_weight_norm_naming(tmp_path: Path, tiny_folder: Path) -> None:
    new_names = write_random_checkpoint(tmp_path / "new", "tiny", seed=0, weight_norm_names="parametrizations")
    for folder in (tiny_folder, new_names):
        mods, report = _tiny_mods(folder)
        assert report.ok, report.summary()
        _same_files(folder, export_coqui(mods, tmp_path / f"out_{folder.name}"))


def test_aliases_trainer_tensors_and_prefix_are_accounted_for(tmp_path: Path, tiny_folder: Path) -> None:
    """A GPTTrainer checkpoint (``xtts.`` prefix, its DVAE copy) with ``init_gpt_for_inference``'s aliases
    loads with every tensor accounted for and is written back as it was."""
    folder = tmp_path / "trainer"
    folder.mkdir()
    for name in ("dvae.pth", "mel_stats.pth", "vocab.json", "config.json"):
        (folder / name).write_bytes((tiny_folder / name).read_bytes())
    sd = torch.load(tiny_folder / "model.pth", weights_only=True)["model"]
    out = {f"xtts.{k}": v for k, v in sd.items()}
    out["xtts.gpt.gpt.wte.weight"] = sd["gpt.mel_embedding.weight"].clone()
    out["xtts.gpt.gpt_inference.lm_head.1.weight"] = sd["gpt.mel_head.weight"].clone()
    out["xtts.gpt.gpt_inference.transformer.h.0.ln_1.weight"] = sd["gpt.gpt.h.0.ln_1.weight"].clone()
    out["dvae.encoder.0.0.weight"] = torch.randn(16, 80, 3)
    torch.save({"model": out, "optimizer": {"step": torch.tensor(3)}}, folder / "model.pth")
    mods, report = _tiny_mods(folder)
    fr = report.file("model.pth")
    assert report.ok and fr.aliases == 3 and fr.kept == ["dvae.encoder.0.0.weight"]
    assert fr.ignored_entries == ["optimizer"]
    exported = export_coqui(mods, tmp_path / "out")
    again = torch.load(exported / "model.pth", weights_only=True)["model"]
    assert list(again) == list(out) and all(torch.equal(again[k], out[k]) for k in out)


def test_missing_unexpected_and_mismatched_tensors_are_reported(tmp_path: Path, tiny_folder: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    for name in ("dvae.pth", "mel_stats.pth", "vocab.json", "config.json"):
        (folder / name).write_bytes((tiny_folder / name).read_bytes())
    sd = torch.load(tiny_folder / "model.pth", weights_only=True)["model"]
    del sd["gpt.final_norm.bias"]
    sd["gpt.something_new"] = torch.zeros(3)
    sd["gpt.mel_head.bias"] = torch.zeros(7)
    torch.save({"model": sd}, folder / "model.pth")
    with pytest.raises(UserError) as err:
        _tiny_mods(folder)
    text = str(err.value)
    assert "3 tensors unaccounted for" in text
    assert "missing (1): gpt.final_norm.bias" in text and "unexpected (1): gpt.something_new" in text
    assert "gpt.mel_head.bias: file (7), model (66)" in text and "model.strict_load=false" in text
    _, report = _tiny_mods(folder, strict=False)
    assert report.unaccounted == 3


def test_foreign_folders_are_user_errors(tmp_path: Path, tiny_folder: Path) -> None:
    with pytest.raises(UserError, match="no model.pth"):
        build_modules_from = tmp_path / "empty"
        build_modules_from.mkdir()
        _tiny_mods(build_modules_from)
    folder = tmp_path / "pickled"
    folder.mkdir()
    for name in ("dvae.pth", "mel_stats.pth", "vocab.json", "config.json"):
        (folder / name).write_bytes((tiny_folder / name).read_bytes())
    torch.save({"model": {"x": torch.zeros(1)}, "obj": object()}, folder / "model.pth")
    with pytest.raises(UserError, match="refused"):
        _tiny_mods(folder)


# ------------------------------------------------------------------------------------------ tokenizer
def test_new_language_tokens_encode_amharic_without_unknowns(tiny_folder: Path) -> None:
    from speechtrain.data.speak import amharic_sentences

    tok = XttsTokenizer.from_file(tiny_folder / "vocab.json")
    texts = amharic_sentences(30, seed=3)
    assert not tok.has_language("am") and tok.unknown_chars(" ".join(texts))
    new, added = tok.extended(["am"], expand_tokens(["U+1200..U+137C"]))
    assert added[0] == "[am]" and new.num_tokens == tok.num_tokens + len(added)
    for text in texts:
        ids = new.encode(text, "am")
        assert new.unk_id not in ids and ids[0] == new.vocab["[am]"]
        assert new.decode(ids[1:]) == text
    assert new.encode("hello world", "en") == tok.encode("hello world", "en")  # old ids unchanged
    assert "am" in new.languages


def test_resize_keeps_old_rows_and_starts_new_ones_at_the_mean(tiny_folder: Path) -> None:
    mods, _ = _tiny_mods(tiny_folder)
    gpt = mods.gpt
    emb = gpt.text_embedding.weight
    old = emb.detach().clone()
    rows = old.shape[0]
    assert gpt.resize_text_vocab(rows + 5) == 5
    assert gpt.text_embedding.weight is emb  # the same Parameter (an optimizer built before still holds it)
    assert torch.equal(emb[:rows], old) and torch.allclose(emb[rows:], old.mean(0, keepdim=True).expand(5, -1))
    assert gpt.text_head.weight.shape[0] == gpt.text_head.bias.shape[0] == rows + 5
    state = gpt.state_dict()
    fresh, _ = _tiny_mods(tiny_folder)
    fresh.gpt.load_state_dict(state)  # a run's grown vocabulary loads into a model built at the folder's size
    assert fresh.gpt.text_embedding.num_embeddings == rows + 5


# ------------------------------------------------------------------------------------------- DVAE codes
def test_cached_dvae_codes_are_each_utterances_own(tiny_folder: Path) -> None:
    """Cached codes come from each utterance alone, so they do not depend on what it is batched with; without
    the cache the padded batch goes through the DVAE (Coqui's way), equal away from the padding."""
    from speechtrain.config import DataConfig
    from speechtrain.data.batch import Batch
    from speechtrain.models.xtts.config import XttsConfig
    from speechtrain.models.xtts.task import XttsTask

    task = XttsTask(XttsConfig(checkpoint_dir=str(tiny_folder), dropout=0.0), DataConfig(sample_rate=22050))
    t = torch.arange(30000) / 22050
    audio = torch.stack([0.3 * torch.sin(2 * torch.pi * 220 * t), 0.2 * torch.sin(2 * torch.pi * 330 * t)])[:, None]
    audio[1, :, 12000:] = 0

    def batch(rows: list[int]) -> Batch:
        lengths = torch.tensor([30000, 12000])[rows]
        return Batch({"audio": audio[rows], "audio_lengths": lengths}, [f"u{i}" for i in rows], 256, 22050)

    norms = task.mods.coqui.mel_norms
    alone = task.mods.dvae.codes(task.mels.dvae(audio[1:2, :, :12000], norms))[0]
    both = task.dvae_codes(batch([0, 1]))
    assert both.dtype == torch.long and torch.equal(both[1, : alone.numel()], alone)
    assert set(task._codes) == {"u0", "u1"} and torch.equal(task.dvae_codes(batch([1]))[0], alone)
    task.cache_codes = False
    padded = task.dvae_codes(batch([0, 1]))
    assert torch.equal(padded[0], both[0]) and torch.equal(padded[1, : alone.numel() - 2], alone[:-2])


# ------------------------------------------------------------------------------------------------ GPT
def _sequence(gpt, lengths: list[int], codes_len: list[int], seed: int = 0) -> dict[str, torch.Tensor]:  # noqa: ANN001
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    text = torch.randint(3, 60, (b, max(lengths)), generator=g)
    codes = torch.randint(0, 64, (b, max(codes_len)), generator=g)
    wav = torch.tensor(codes_len) * gpt.code_stride_len
    code_lengths = gpt.code_lengths(wav)
    return gpt.arrange(text, torch.tensor(lengths), codes, code_lengths, max(lengths), max(codes_len) + 3)


def test_arrangement_is_coquis(tiny_folder: Path) -> None:
    """[START] text [STOP] / [start_audio] codes [stop]: targets shifted by one; three more stop positions
    past the codes (code_lengths = ceil(samples / stride) + 3); padding ignored."""
    mods, _ = _tiny_mods(tiny_folder)
    gpt = mods.gpt
    seq = _sequence(gpt, [3, 1], [2, 1])
    start, stop = gpt.start_text_token, gpt.stop_text_token
    assert seq["text_inputs"][1].tolist()[:3] == [start, seq["text_inputs"][1, 1].item(), stop]
    assert seq["text_targets"][1].tolist() == [
        seq["text_inputs"][1, 1].item(),
        stop,
        IGNORE_INDEX,
        IGNORE_INDEX,
        IGNORE_INDEX,
    ]
    mel_t = seq["mel_targets"][1].tolist()
    assert mel_t[1:5] == [gpt.stop_audio_token] * 4 and mel_t[5:] == [IGNORE_INDEX] * (len(mel_t) - 5)
    assert seq["mel_inputs"][1, 0] == gpt.start_audio_token


def test_padded_item_computes_what_it_would_alone(tiny_folder: Path) -> None:
    mods, _ = _tiny_mods(tiny_folder)
    gpt = mods.gpt.eval()
    cond = torch.randn(2, 8, 64)
    both = _sequence(gpt, [9, 4], [12, 5])
    valid = torch.cat([both["text_valid"], both["mel_valid"]], 1)
    t2, m2 = gpt(both["text_inputs"], both["mel_inputs"], cond, valid)
    alone = {k: v[1:] for k, v in both.items()}
    n_text, n_mel = int(alone["text_valid"].sum()), int(alone["mel_valid"].sum())
    t1, m1 = gpt(alone["text_inputs"][:, :n_text], alone["mel_inputs"][:, :n_mel], cond[1:], None)
    assert torch.allclose(t2[1, :n_text], t1[0], atol=1e-5) and torch.allclose(m2[1, :n_mel], m1[0], atol=1e-5)


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_cached_greedy_generation_equals_teacher_forced_argmax(tiny_folder: Path, use_sdpa: bool) -> None:
    mods, _ = _tiny_mods(tiny_folder)
    gpt = mods.gpt.eval()
    for m in gpt.modules():
        if hasattr(m, "use_sdpa"):
            m.use_sdpa = use_sdpa
    cond = gpt.conditioning_latents(torch.randn(1, 80, 40))
    text = torch.tensor([[5, 9, 11, 7]])
    greedy = SamplingSettings(do_sample=False, repetition_penalty=1.0)
    codes, latents = gpt.generate(cond, text, greedy, max_new_tokens=12)
    n = codes.numel()
    full_text = torch.tensor([[gpt.start_text_token, 5, 9, 11, 7, gpt.stop_text_token]])
    mel_in = torch.cat([torch.tensor([gpt.start_audio_token]), codes[:-1]])[None]
    _, logits = gpt(full_text, mel_in, cond)
    assert torch.equal(logits[0].argmax(-1), codes)
    hidden = gpt.final_norm(
        gpt.gpt(
            torch.cat(
                [
                    cond,
                    gpt.text_embedding(full_text) + gpt.text_pos_embedding(6, cond.device)[None],
                    gpt.mel_embedding(mel_in) + gpt.mel_pos_embedding(n, cond.device)[None],
                ],
                1,
            )
        )
    )
    assert torch.allclose(latents[0], hidden[0, -n:], atol=1e-5)


def test_sampling_processors_follow_huggingface_order() -> None:
    from speechtrain.models.xtts.gpt import XttsGPT

    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]])
    seen = torch.tensor([[True, False, False, True, False]])
    s = SamplingSettings(temperature=0.5, top_k=3, top_p=0.9, repetition_penalty=2.0)
    out = XttsGPT.process_logits(logits.clone(), seen, s)
    # penalty: 2.0 -> 1.0, -1.0 -> -2.0; temperature: x2; top-k 3 keeps 2.0, 2.0, 1.0; top-p 0.9 of those
    assert torch.isinf(out[0, 3]) and torch.isinf(out[0, 4])
    assert out[0, 0] == out[0, 1] == 2.0 and (out[0, 2] == 1.0 or torch.isinf(out[0, 2]))


# ---------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_amharic_finetune_synthesize_and_export_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny CPU recipe on an Amharic corpus spoken by espeak-ng, through the CLI: the audio CE falls, the
    transcripts meet no unknown token, synthesize with a reference clip writes speech-length audio, export
    writes a Coqui folder that loads strictly with the run's GPT (grown vocabulary, [am] added)."""
    pytest.importorskip("espeakng_loader")
    import soundfile as sf

    from speechtrain.cli.main import main
    from speechtrain.data.speak import make_language_corpus
    from speechtrain.recipes.inference import load_task
    from speechtrain.train.metrics import read_metrics

    corpus = make_language_corpus(tmp_path / "am", "am", utterances=16, seed=0)
    run, base = tmp_path / "run", tmp_path / "base"
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "xtts_finetune_tiny.yaml"
    steps = 48  # fewer: the stop code comes too early (16 steps: 0.18 s for a 2.1 s sentence)
    args = [
        f"data.manifest={corpus}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"model.checkpoint_dir={base}",
        f"train.output_dir={run}",
        f"train.max_steps={steps}",
        "train.log_every=1",
        f"train.eval_every={steps}",
        f"train.save_every={steps}",
        "train.device=cpu",
    ]
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(recipe), *args]) == 0
    ce = [r["audio_ce"] for r in read_metrics(run)]
    assert len(ce) == steps and sum(ce[-4:]) / 4 < sum(ce[:4]) / 4 - 0.3  # it learns the corpus's codes

    _, task = load_task(run, device="cpu")
    tok = task._tok()
    assert tok.has_language("am") and "[am]" in task.mods.coqui.added_tokens
    texts = [line.split("|")[1] for line in (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()]
    assert all(tok.unk_id not in task.text_ids(t, "am") for t in texts)

    ref = sorted((corpus / "wavs").glob("*.wav"))[0]  # the first sentence, spoken by espeak-ng
    wav = tmp_path / "out.wav"
    cli = ["synthesize", str(run), "--text", texts[0], "--speaker-wav", str(ref), "--language", "am"]
    assert main([*cli, "--out", str(wav), "--seed", "0", "--max-seconds", "6", "--device", "cpu"]) == 0
    audio, rate = sf.read(wav)
    spoken = sf.info(ref).duration
    assert rate == 24000 and 0.4 * spoken < audio.size / rate < 2.5 * spoken and float(abs(audio).max()) > 0

    sentences = tmp_path / "texts.txt"
    sentences.write_text("\n".join(texts[:2]) + "\n", encoding="utf-8")
    rtf_args = ["--texts", str(sentences), "--speaker-wav", str(ref), "--language", "am", "--warmup", "0"]
    assert main(["rtf", str(run), *rtf_args, "--device", "cpu", "--json", str(tmp_path / "rtf.json")]) == 0
    rtf = json.loads((tmp_path / "rtf.json").read_text())
    assert rtf["model"] == "xtts" and len(rtf["items"]) == 2 and rtf["rtf"] > 0 and rtf["audio_seconds"] > 0.4

    out = tmp_path / "exported"
    assert main(["export", str(run), str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert "am" in config["languages"] and config["model_args"]["gpt_number_text_tokens"] == tok.num_tokens
    again, report = _tiny_mods(out)  # strict: every tensor accounted for
    assert report.ok and report.unaccounted == 0
    for key, value in task.mods.gpt.state_dict().items():
        assert torch.equal(again.gpt.state_dict()[key], value), key
    assert not (tmp_path / "runs").exists()  # loading the run wrote no random folder where it ran


def test_export_of_a_run_without_an_export_format_is_a_user_error(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """Refused from the run's config alone: the family declares no export (no weights are read)."""
    from types import SimpleNamespace

    import speechtrain.recipes.export as export
    from speechtrain.cli.main import main

    cfg = SimpleNamespace(model=SimpleNamespace(name="gpt_tts"))  # vits has one now (piper): gpt_tts has none
    monkeypatch.setattr(export, "load_run_config", lambda *a, **k: cfg)
    assert main(["export", "runs/some_gpt_tts", "out"]) == 2
    err = capsys.readouterr().err
    assert "a 'gpt_tts' run has no export format" in err and "autoregressive sampling loop" in err


@pytest.mark.slow
def test_resume_after_the_vocabulary_grew_continues_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run is built at the folder's vocabulary size, then its checkpoint grows the text embedding and
    head (and their AdamW moments) back: the same losses as a run that never stopped."""
    pytest.importorskip("espeakng_loader")
    from speechtrain.cli.main import main
    from speechtrain.data.speak import make_language_corpus
    from speechtrain.train.metrics import read_metrics

    corpus = make_language_corpus(tmp_path / "am", "am", utterances=8, seed=1)
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "xtts_finetune_tiny.yaml"
    common = [
        "--config",
        str(recipe),
        f"data.manifest={corpus}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"model.checkpoint_dir={tmp_path / 'base'}",
        "data.eval_utterances=2",
        "train.log_every=1",
        "train.eval_every=100",
        "train.save_every=3",
        "train.eval_audio_samples=0",
        "train.device=cpu",
    ]
    monkeypatch.chdir(tmp_path)
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(["train", *common, "train.max_steps=6", f"train.output_dir={full}"]) == 0
    assert main(["train", *common, "train.max_steps=3", f"train.output_dir={part}"]) == 0
    assert main(["train", "--resume", str(part), "train.max_steps=6"]) == 0
    assert [r["loss"] for r in read_metrics(part)] == [r["loss"] for r in read_metrics(full)]


# ---------------------------------------------------------------------------------------------- optimizer
GROUPS = json.loads((Path(__file__).parent / "fixtures" / "xtts_v2_coqui_optimizer_groups.json").read_text())


def test_optimizer_groups_are_coquis_on_the_real_xtts_v2_layout() -> None:
    """Coqui's ``optimizer_wd_only_on_weights`` (its XTTS-v2 recipes): weight decay on 147 of the GPT's 426
    tensors; biases, norms and the text/mel/position embeddings (279) without (recorded from Coqui's own
    ``GPTTrainer.get_optimizer``, tests/fixtures/make_xtts_v2_optimizer_groups.py)."""
    from speechtrain.models.xtts.optim import no_weight_decay

    with torch.device("meta"):
        mods = build_modules(arch_preset("xtts_v2"))
    exempt = no_weight_decay(mods.gpt)
    names = {n for n, _ in mods.gpt.named_parameters()}
    assert sorted(exempt) == GROUPS["no_decay"] and len(exempt) == 279
    assert sorted(names - exempt) == GROUPS["decay"] and len(names) == 426
    assert "conditioning_perceiver.latents" in names - exempt  # as Coqui: not a bias, norm or embedding


def test_the_task_builds_coquis_two_groups(tiny_folder: Path) -> None:
    """The task's optimizer: AdamW with weight decay on the weights only (the same rule on the tiny layout),
    one group as before when there is no weight decay."""
    from speechtrain.config import DataConfig, OptimConfig
    from speechtrain.models.xtts.config import XttsConfig
    from speechtrain.models.xtts.optim import no_weight_decay
    from speechtrain.models.xtts.task import XttsTask
    from speechtrain.train.schedule import build_stage_optimizers

    task = XttsTask(XttsConfig(checkpoint_dir=str(tiny_folder)), DataConfig())
    specs = task.optimizer_specs()
    gpt = task.mods.gpt
    assert specs[0].no_weight_decay == no_weight_decay(gpt, "gpt.")
    params = dict(gpt.named_parameters())
    for wd, groups in ((0.01, 2), (0.0, 1)):
        optim = OptimConfig(name="adamw", lr=5e-6, weight_decay=wd)
        opts, records, _ = build_stage_optimizers(specs, task.modules(), optim, torch.device("cpu"), 1.0, 10)
        opt = opts["main"]
        assert len(opt.param_groups) == groups
        if groups == 2:
            decayed, free = (set(map(id, g["params"])) for g in opt.param_groups)
            assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
            assert free == {id(params[n.removeprefix("gpt.")]) for n in specs[0].no_weight_decay}
            assert decayed == {id(p) for p in params.values()} - free
            assert id(params["text_embedding.weight"]) in free and id(params["gpt.h.0.attn.c_attn.weight"]) in decayed
            assert records["main"].info["no_decay_tensors"] == len(free)
            assert f"({len(free)} without weight decay)" in records["main"].detail
