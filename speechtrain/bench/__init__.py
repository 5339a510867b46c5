"""Benchmarks that prove every speed-up in speech units (audio seconds per second).

The pieces take typed sections and explicit values; :func:`speechtrain.recipes.bench.run_bench`
reads the Config and runs them (the plain-PyTorch baseline and speechtrain on the same model and data,
or the whole ladder). Parts:

- :mod:`~speechtrain.bench.measure`  one configuration: timed window, data wait, peak memory
- :mod:`~speechtrain.bench.baseline` the plain PyTorch loop every speed-up is compared with
- :mod:`~speechtrain.bench.ablate`   the ladder of changes, passes interleaved, medians and spreads, verdicts
- :mod:`~speechtrain.bench.diagnose` where the time goes (input, host sync, memory, compute)
- :mod:`~speechtrain.bench.report`   JSON, markdown table, PNG chart
- :mod:`~speechtrain.bench.nvml`, :mod:`~speechtrain.bench.flops`  GPU busy share, MFU

Importing this package is light; torch is imported when a benchmark runs.
"""
