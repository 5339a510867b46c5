"""speechtrain: fast, out-of-memory-proof training of speech models, with every speed-up measured.

The top-level import is light (no torch model code, plotting or logging backends); import the
parts you need: ``speechtrain.config``, ``speechtrain.data``, ``speechtrain.accel``,
``speechtrain.memory``, ``speechtrain.train``, ``speechtrain.bench``.
"""

__version__ = "0.1.0"
