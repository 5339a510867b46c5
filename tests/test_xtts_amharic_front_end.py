"""The Amharic built-in front ends plugged into XTTS (issue 29): ``model.text_front_end`` takes a function of
one argument (``speechtrain.data.text.amharic:g2p``, ``...:clean``) as well as ``(text, language)``; before,
the G2P crashed with a raw TypeError. A failing user front end is a one-line error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("espeakng_loader")

from speechtrain.errors import UserError  # noqa: E402
from speechtrain.models.xtts.tokenizer import load_front_end  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "xtts_finetune_tiny.yaml"


def test_one_argument_front_ends_load() -> None:
    g2p = load_front_end("speechtrain.data.text.amharic:g2p")
    assert g2p("ሰላም", "am") == "səlam"
    clean = load_front_end("speechtrain.data.text.amharic:clean")
    assert clean("ስልክ 0911234567 ነው።", "am").split()[1:3] == ["ዜሮ", "ዘጠኝ"]
    assert clean("ነው።", "am").endswith(".")


def _boom(text: str) -> str:
    raise ValueError("no rules for this")


def test_a_failing_front_end_is_a_user_error() -> None:
    fe = load_front_end(f"{__name__}:_boom")
    with pytest.raises(UserError, match="text_front_end=.*_boom failed on 'ሰላም': ValueError: no rules"):
        fe("ሰላም", "am")


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_xtts_trains_with_the_amharic_g2p_as_its_front_end(tmp_path: Path) -> None:
    from speechtrain.cli.main import main
    from speechtrain.data.speak import make_language_corpus

    root = make_language_corpus(tmp_path / "am", "am", utterances=12, layout="xtts")
    args = [
        "--config",
        str(RECIPE),
        f"data.manifest={root}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"model.checkpoint_dir={tmp_path / 'base'}",
        "model.text_front_end=speechtrain.data.text.amharic:g2p",
        f"train.output_dir={tmp_path / 'run'}",
        "train.max_steps=2",
        "train.eval_every=2",
        "train.save_every=2",
        "train.eval_batches=1",
        "train.eval_audio_samples=0",
        "train.device=cpu",
    ]
    assert main(["train", *args]) == 0
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
