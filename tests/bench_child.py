"""A stand-in for ``python -m speechtrain.recipes.bench SPEC.json OUT.json`` in the ladder's tests: what a row's
process does is read from the spec's name ("hang", "crash", "oom", else a result), in well under a second."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from speechtrain.bench.measure import RunResult

DYNAMO_ERROR = """W1127 12:00:00.000000 123 torch/_dynamo/convert_frame.py:1000] some warning first
Traceback (most recent call last):
  File "/x/speechtrain/recipes/bench.py", line 10, in _main
    result = execute(spec)
             ^^^^^^^^^^^^^
  File "/x/torch/_dynamo/eval_frame.py", line 20, in _fn
    return fn(*args, **kwargs)
torch._dynamo.exc.Unsupported: Graph break under GenericContextWrappingVariable
  Explanation: a context manager the compiler cannot trace
  Hint: move the context manager out of the compiled region

from user code:
   File "/x/speechtrain/models/gpt_tts.py", line 99, in forward

Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to PyTorch).
"""


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    name = spec["name"]
    print(f"row {name} starting", flush=True)
    if name == "hang":
        time.sleep(120)
    if name == "crash":
        sys.stderr.write(DYNAMO_ERROR)
        return 1
    result = RunResult(name, 4, 1.0, 8, 10.0, 100, 90, 0.0, 1 << 20)
    Path(argv[1]).write_text(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
