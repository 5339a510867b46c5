"""``python tests/sigterm_twice.py train ARGS``: ``speechtrain train ARGS`` sent SIGTERM after its second step and
again the moment a feature-cache reader lease is given back: a scheduler's second SIGTERM 50 ms after the first,
landing where it once did (then: "Exception ignored in: ReaderLease.__del__ ... KeyboardInterrupt: SIGTERM")."""

from __future__ import annotations

import os
import signal
import sys

from speechtrain.cli.main import main
from speechtrain.data.store import ReaderLease
from speechtrain.train.trainer import Trainer

_train_step, _release = Trainer.train_step, ReaderLease.release


def _step_then_sigterm(self: Trainer, micro_batches: list) -> dict:
    out = _train_step(self, micro_batches)
    if self.step == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    return out


def _sigterm_then_release(self: ReaderLease) -> None:
    if self._fd is not None and self._pid == os.getpid():  # a lease still held: the second signal lands here
        os.kill(os.getpid(), signal.SIGTERM)
    _release(self)


if __name__ == "__main__":
    Trainer.train_step = _step_then_sigterm  # type: ignore[method-assign]
    ReaderLease.release = _sigterm_then_release  # type: ignore[method-assign]
    raise SystemExit(main(sys.argv[1:]))
