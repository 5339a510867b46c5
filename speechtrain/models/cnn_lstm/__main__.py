"""``python -m speechtrain.models.cnn_lstm --config recipes/classifier_cnn_lstm.yaml``: parameter counts."""

from speechtrain.models.common import parameter_report

raise SystemExit(parameter_report())
