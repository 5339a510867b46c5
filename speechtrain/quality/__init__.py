"""Objective quality metrics: what a model's audio (or a classifier's answers) is worth, measured at every
evaluation, by ``speechtrain eval`` and by the bench's time-to-quality.

- :mod:`speechtrain.quality.catalog`: the metrics by name, their direction, the kinds of model and what each gets
  (plain data; the config reads it);
- :mod:`speechtrain.quality.metrics`: one function per metric (PESQ, STOI, DNSMOS from their packages; MCD,
  MCD-DTW, multi-resolution STFT, f0 errors, macro F1 in numpy);
- :mod:`speechtrain.quality.score`: a set of (generated, reference) items scored with a kind's metrics.

This package sits low in the layers (it imports only :mod:`speechtrain.logs`): the Trainer's evaluation, the
bench and the recipes call it, and take the run's own mel and f0 functions as arguments.
"""
