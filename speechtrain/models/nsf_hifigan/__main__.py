"""``python -m speechtrain.models.nsf_hifigan --config recipes/vocoder_nsf_hifigan.yaml``: parameter counts."""

from speechtrain.models.common import parameter_report

raise SystemExit(parameter_report())
