"""``torchrun ... tests/torchrun_checksums.py OUT_DIR train ARGS``: ``speechtrain train ARGS`` on every rank, each rank
appending a checksum of its weights after every step to ``OUT_DIR/rank<N>.jsonl`` (the tests compare the ranks)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from speechtrain.cli.main import main
from speechtrain.train.trainer import Trainer

_train_step = Trainer.train_step


def _train_step_with_checksum(self: Trainer, micro_batches: list) -> dict:
    out = _train_step(self, micro_batches)
    digest = hashlib.sha256()
    for name, module in sorted(self.modules.items()):
        for key, value in sorted(module.state_dict().items()):
            digest.update(f"{name}.{key}".encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    row = {"step": self.step, "weights": digest.hexdigest()}
    with (Path(sys.argv[1]) / f"rank{os.environ['RANK']}.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    return out


if __name__ == "__main__":
    Trainer.train_step = _train_step_with_checksum  # type: ignore[method-assign]
    raise SystemExit(main(sys.argv[2:]))
