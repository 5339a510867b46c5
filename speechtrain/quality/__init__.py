"""Objective quality metrics: what a model's audio (or a classifier's answers) is worth, measured at every
evaluation, by ``speechtrain eval`` and by the bench's time-to-quality.

- :mod:`speechtrain.quality.catalog`: the metrics by name, their direction, the kinds of model and what each gets
  (plain data; the config reads it);
- :mod:`speechtrain.quality.metrics`: one function per metric (PESQ, STOI, DNSMOS from their packages; MCD,
  MCD-DTW, multi-resolution STFT, f0 errors, macro F1 in numpy);
- :mod:`speechtrain.quality.score`: a set of (generated, reference) items scored with a kind's metrics.
- :mod:`speechtrain.quality.judge`: the intelligibility judge, a small CTC recogniser trained on a corpus's own
  recordings (its held-out CER the ceiling of ``cer``), and its cache;
- :mod:`speechtrain.quality.asr`, :mod:`speechtrain.quality.pocketsphinx_asr`: the user's ASR model folder, and
  pocketsphinx's bundled English model; :mod:`speechtrain.quality.distillmos_mos`: DistillMOS.

This package sits low in the layers (it imports only :mod:`speechtrain.logs`, ``errors`` and ``ckptio``): the
Trainer's evaluation, the bench and the recipes call it, and take the run's own mel and f0 functions as arguments.
"""
