"""The table of export formats (one module per format declares its :class:`ExportFormat`)."""

from __future__ import annotations

from speechtrain.errors import UserError
from speechtrain.export import coqui, jik876, onnx, piper, singingvocoders
from speechtrain.export.job import ExportFormat

#: why a family that no format serves and no format refuses has no export
NO_FORMAT = (
    "no export format: its best.pt is the model (load it with speechtrain.recipes.inference.InferenceRecipe(RUN_DIR), "
    "or start a run from it with train.init_from); `speechtrain export RUN OUT --consolidate` writes any run's "
    "weights as one file"
)

FORMATS: dict[str, ExportFormat] = {
    f.key: f for f in (piper.FORMAT, onnx.FORMAT, jik876.FORMAT, coqui.FORMAT, singingvocoders.FORMAT)
}


def formats_of(family: str) -> list[ExportFormat]:
    """The formats that serve ``family``, its default first."""
    return [f for f in FORMATS.values() if family in f.families]


def format_for(family: str, key: str | None) -> ExportFormat:
    """The format ``key`` for a run of ``family`` (None: its default); UserError with the reason otherwise."""
    served = formats_of(family)
    if key is None:
        if not served:
            refusals = [f"{f.key}: {f.refused[family]}" for f in FORMATS.values() if family in f.refused]
            raise UserError(
                f"a '{family}' run has no export format ({'; '.join(refusals)})"
                if refusals
                else f"a '{family}' run: {NO_FORMAT}"
            )
        return served[0]
    if key not in FORMATS:
        raise UserError(f"--format {key}: unknown; formats: {', '.join(FORMATS)}")
    fmt = FORMATS[key]
    if family in fmt.refused:
        raise UserError(f"--format {key} cannot export a '{family}' run: {fmt.refused[family]}")
    if family not in fmt.families:
        others = ", ".join(f.key for f in served) or "none"
        raise UserError(
            f"--format {key} exports {', '.join(fmt.families)} runs, not '{family}' (formats for {family}: {others})"
        )
    return fmt


def formats_out_of_reach(family: str, model: object, data: object) -> list[str]:
    """Why a run of these sections could not be exported in each format serving ``family`` (its runtime's
    contract): one line per format, told at step 0 so that the recipe is changed before the training, not after."""
    out = []
    for fmt in formats_of(family):
        problems = fmt.contract(model, data)
        if problems:
            out.append(f"--format {fmt.key} ({fmt.runtime}): " + "; ".join(problems))
    return out
