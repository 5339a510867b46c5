"""``python -m speechtrain.models.hifigan --config recipes/vocoder_hifigan.yaml``: parameter counts."""

from speechtrain.models.common import parameter_report

raise SystemExit(parameter_report())
