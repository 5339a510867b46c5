"""The Listen tab: a finished run's inference verb (synthesize, vocode, classify), through the inference recipe
the command line uses (:class:`speechtrain.recipes.inference.InferenceRecipe`, via :mod:`speechtrain.ui.backend`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from speechtrain.errors import UserError
from speechtrain.ui import backend
from speechtrain.ui.page import Workspace, df, guarded, ok


@dataclass
class ListenTab:
    run: Any
    text: Any
    synthesize: Any
    audio_in: Any
    vocode: Any
    classify: Any
    status: Any
    audio_out: Any
    labels: Any


def layout(ws: Workspace) -> ListenTab:
    run = gr.Dropdown([], label="finished run", allow_custom_value=True, elem_id="listen-run")
    with gr.Row():
        text = gr.Textbox("the quick brown fox", label="text", scale=3, elem_id="text")
        synthesize = gr.Button("Synthesize", variant="primary", elem_id="synthesize")
    with gr.Row():
        audio_in = gr.Audio(label="audio in (vocode / classify)", type="filepath")
        vocode = gr.Button("Vocode")
        classify = gr.Button("Classify")
    status = gr.Markdown(elem_id="listen-status")
    audio_out = gr.Audio(label="output", type="filepath", interactive=False)
    labels = gr.Dataframe(headers=["label", "probability"], label="classes", interactive=False)
    return ListenTab(run, text, synthesize, audio_in, vocode, classify, status, audio_out, labels)


def _run(ws: Workspace, run: str) -> Path:
    """The run picked, once its saved config passes what the UI runs (a model of its own only when allowed)."""
    path = ws.resolve_run(run)
    ws.load_run_config(path)
    return path


def wire(ws: Workspace, tab: ListenTab) -> None:
    @guarded(2)
    def do_synthesize(run: str, sentence: str) -> tuple[str, str]:
        path = _run(ws, run)
        out = ws.shown / "listen" / f"{path.name}-{time.strftime('%H%M%S')}-{time.time_ns() % 1000:03d}.wav"
        res = backend.synthesize(path, sentence, out)
        return ok(_rtf_line("synthesized", res)), str(res.audio_path)

    tab.synthesize.click(do_synthesize, [tab.run, tab.text], [tab.status, tab.audio_out], api_name="synthesize")

    @guarded(2)
    def do_vocode(run: str, wav: str | None) -> tuple[str, str]:
        if not wav:
            raise UserError("give an audio file to vocode")
        path = _run(ws, run)
        out = ws.shown / "listen" / f"{path.name}-vocoded-{time.strftime('%H%M%S')}.wav"
        res = backend.vocode(path, wav, out)
        return ok(_rtf_line("vocoded", res)), str(res.audio_path)

    tab.vocode.click(do_vocode, [tab.run, tab.audio_in], [tab.status, tab.audio_out], api_name="vocode")

    @guarded(2)
    def do_classify(run: str, wav: str | None) -> tuple[str, pd.DataFrame]:
        if not wav:
            raise UserError("give an audio file to classify")
        label, probs, seconds = backend.classify(_run(ws, run), wav)
        rows = sorted(probs.items(), key=lambda kv: -kv[1])
        return ok(f"label **{label}** ({probs[label]:.3f}) in {seconds * 1000:.0f} ms"), df(
            [[k, round(v, 4)] for k, v in rows], ["label", "probability"]
        )

    tab.classify.click(do_classify, [tab.run, tab.audio_in], [tab.status, tab.labels], api_name="classify")


def _rtf_line(what: str, res: backend.Inference) -> str:
    return f"{what} {res.seconds:.2f} s of audio in {res.compute_seconds:.2f} s: RTF {res.rtf:.3f}"
