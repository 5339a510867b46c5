#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing, then runs the job.
#   bash scripts/run.sh demo   -> the main job on the built-in demo data
#   bash scripts/run.sh test   -> lint + the whole test suite (what CI runs)
#
# Where things install:
#   - a virtual environment the script finds or is asked for wins: ./.venv when it exists, or the folder
#     named by SPEECHTRAIN_VENV (made when missing); an activated environment ($VIRTUAL_ENV) is used as is;
#   - an "externally managed" interpreter (PEP 668: Debian/Ubuntu's own /usr/bin/python3) is never
#     installed into: ./.venv is made from it and used instead;
#   - otherwise the interpreter named by $PYTHON (default python3) itself.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

say() { echo "[setup] $*"; }

externally_managed() {
  # pip refuses such an interpreter outside a virtual environment (PEP 668's marker file in its stdlib)
  "$1" -c 'import os, sys, sysconfig
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)' 2>/dev/null
}

make_venv() {  # make_venv DIR BASE_PYTHON
  say "making a virtual environment in $1 (from $("$2" -c 'import sys; print(sys.executable)'))"
  if ! "$2" -m venv "$1" >/tmp/speechtrain_venv.$$ 2>&1; then
    cat /tmp/speechtrain_venv.$$ >&2; rm -f /tmp/speechtrain_venv.$$
    echo "error: could not make a virtual environment with $2 -m venv." >&2
    echo "  On Debian/Ubuntu install the venv module first: sudo apt-get install python3-venv" >&2
    echo "  (or point PYTHON at another Python >= 3.10, e.g. PYTHON=python3.11 bash scripts/run.sh ...)" >&2
    exit 1
  fi
  rm -f /tmp/speechtrain_venv.$$
}

choose_python() {
  local venv=${SPEECHTRAIN_VENV:-}
  if [ -n "${VIRTUAL_ENV:-}" ] && [ -z "$venv" ] && [ -z "${PYTHON:-}" ]; then
    PY="$VIRTUAL_ENV/bin/python"; say "using the active virtual environment $VIRTUAL_ENV"; return
  fi
  if [ -z "$venv" ] && [ -x .venv/bin/python ]; then venv=.venv; fi
  if [ -z "$venv" ] && externally_managed "$PY"; then
    say "$("$PY" -c 'import sys; print(sys.executable)') is externally managed (PEP 668): pip may not install into it"
    venv=.venv
  fi
  if [ -n "$venv" ]; then
    [ -x "$venv/bin/python" ] || make_venv "$venv" "$PY"
    PY="$venv/bin/python"
    say "using the virtual environment $venv ($("$PY" -c 'import sys; print(sys.executable)'))"
  fi
}

install() {  # install demo|test
  local stamp=".speechtrain_installed_$1" extra imports
  if [ "$1" = test ]; then
    # what the tests need (librosa too: speechmos, the DNSMOS of the quality metrics, imports it); the peers they
    # compare against (lightning) and the browser driver
    # (playwright) only in CI (CI=true), where their tests must run: elsewhere those tests skip and say so
    extra="[dev]"
    imports="speechtrain, pytest, ruff, soundfile, soxr, tensorboard, matplotlib, importlinter, mypy, gradio, gradio_client, onnx, onnxruntime, piper, num2words, tokenizers, pesq, pystoi, speechmos, librosa"
    if [ "${CI:-}" = true ]; then
      extra="[ci]"
      imports="$imports, lightning, playwright"
    fi
  else
    extra="[logging,plot]"
    imports="speechtrain, soundfile, soxr, tensorboard, matplotlib, espeakng_loader"
  fi
  # torch first: an unpinned torch from the registry pulls GBs of CUDA wheels.
  if ! "$PY" -c 'import torch, sys; v=tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 9))' 2>/dev/null; then
    say "installing torch (CPU build 2.13.0) into $("$PY" -c 'import sys; print(sys.prefix)')"
    "$PY" -m pip install -q "torch==2.13.0"
  fi
  if ! "$PY" -c "import $imports" 2>/dev/null || [ pyproject.toml -nt "$stamp" ] \
     || ! "$PY" -c 'import speechtrain, pathlib, sys; sys.exit(pathlib.Path(speechtrain.__file__).resolve().parents[1] != pathlib.Path.cwd().resolve())' 2>/dev/null; then
    say "installing speechtrain$extra (editable, from $(pwd)) into $("$PY" -c 'import sys; print(sys.prefix)')"
    "$PY" -m pip install -q -e ".$extra"
    touch "$stamp"
  fi
  # (found, not imported: distillmos imports torchaudio, which is left out)
  if [ "$1" = test ] && ! "$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("distillmos") and u.find_spec("xls_r_sqa")))' 2>/dev/null; then
    # DistillMOS, the second MOS predictor, without its declared torchaudio: pip's torchaudio for a CPU torch 2.13
    # does not load, and transformers imports it once installed. Its other requirements are in the dev extra.
    say "installing distillmos and xls-r-sqa (--no-deps: without torchaudio)"
    "$PY" -m pip install -q --no-deps "distillmos>=0.9" "xls-r-sqa>=0.1"
  fi
}

cmd=${1:-demo}; shift || true
case "$cmd" in demo|test) ;; *) echo "usage: bash scripts/run.sh demo|test [args]" >&2; exit 2 ;; esac
choose_python
install "$cmd"
case "$cmd" in
  demo) exec "$PY" -m speechtrain demo "$@" ;;
  test)
    # The UI's browser test needs a headless Chromium. This script installs nothing outside the Python
    # environment: without one, the browser test is skipped and says so (CI's .ci/run installs one first).
    if [ -z "${SPEECHTRAIN_BROWSER_TESTS:-}" ]; then
      if why=$("$PY" -c 'import sys
from speechtrain.ui.browser import find_chromium
try:
    print(find_chromium()[1])
except RuntimeError as exc:
    print(exc)
    sys.exit(1)' 2>/dev/null); then
        say "browser test: $why"
      else
        say "the UI browser test will be SKIPPED: $why"
        export SPEECHTRAIN_BROWSER_TESTS=skip
      fi
    fi
    "$PY" -m ruff check .
    "$PY" -m ruff format --check .
    "$PY" -c 'import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())'  # .importlinter contracts
    "$PY" -m mypy                                           # types of speechtrain/ ([tool.mypy] in pyproject.toml)
    exec "$PY" -m pytest -q "$@"
    ;;
esac
