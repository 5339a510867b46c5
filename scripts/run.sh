#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing, then runs the job.
#   bash scripts/run.sh demo   -> the main job on the built-in demo data
#   bash scripts/run.sh test   -> lint + the whole test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

install() {
  # torch first: an unpinned torch from the registry pulls GBs of CUDA wheels.
  if ! "$PY" -c 'import torch, sys; v=tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 9))' 2>/dev/null; then
    echo "[setup] installing torch (CPU build 2.13.0)"
    "$PY" -m pip install -q "torch==2.13.0"
  fi
  if ! "$PY" -c 'import speechtrain, pytest, ruff, soundfile, soxr, tensorboard, matplotlib, librosa, importlinter, mypy, gradio, gradio_client, playwright' 2>/dev/null \
     || [ pyproject.toml -nt .speechtrain_installed ]; then
    echo "[setup] installing speechtrain and its dev tools"
    "$PY" -m pip install -q -e ".[dev]"
    touch .speechtrain_installed
  fi
}

cmd=${1:-demo}; shift || true
install
case "$cmd" in
  demo) exec "$PY" -m speechtrain demo "$@" ;;
  test)
    # the web UI's browser test needs a headless Chromium: Debian's package when none is found
    if ! "$PY" -c 'from speechtrain.ui.browser import find_chromium; find_chromium()' >/dev/null 2>&1 \
       && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      echo "[setup] installing a headless Chromium (Debian package chromium) for the UI browser test"
      apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
    fi
    "$PY" -m ruff check .
    "$PY" -m ruff format --check .
    "$PY" -c 'import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())'  # .importlinter contracts
    "$PY" -m mypy                                           # types of speechtrain/ ([tool.mypy] in pyproject.toml)
    exec "$PY" -m pytest -q "$@"
    ;;
  *) echo "usage: bash scripts/run.sh demo|test [args]" >&2; exit 2 ;;
esac
