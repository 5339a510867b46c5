"""Recipes: one class per use case, at the edge of the library (torchtune's split).

A recipe reads the :class:`speechtrain.config.Config` once and builds the pieces with explicit,
typed arguments; nothing below this layer takes the whole Config. The command line (``cli/``) and
the UI only parse their input and call a recipe.

- :mod:`~speechtrain.recipes.train`      ``TrainRecipe``: prepare, build, fit; resume a run
- :mod:`~speechtrain.recipes.tune`       ``TuneRecipe``: per-bucket batch sizes, the tuned config
- :mod:`~speechtrain.recipes.estimate`   ``EstimateRecipe``: memory before a run
- :mod:`~speechtrain.recipes.bench`      ``BenchRecipe``: baseline vs speechtrain, the ladder
- :mod:`~speechtrain.recipes.inference`  ``load_run`` / ``RunHandle``: a trained run for inference
- :mod:`~speechtrain.recipes.data`       ``DataRecipe``: every call into ``speechtrain.data`` that needs the config
- :mod:`~speechtrain.recipes.demo`       ``DemoRecipe``: the whole tour of ``speechtrain demo``
"""

from __future__ import annotations

from speechtrain.recipes.common import build_task, load_run_config, seed_everything

__all__ = ["build_task", "load_run_config", "seed_everything"]
