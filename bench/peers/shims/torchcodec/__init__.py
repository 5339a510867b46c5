"""Present only so that coqui-tts's import check for torchcodec (required with torch >= 2.9) passes on a machine
with no torchcodec build: XTTS training reads audio through ``torchaudio.load`` (the bench's torchaudio shim), so
nothing here is used. Any use fails loudly."""

__version__ = "0.0+speechtrain-bench-shim"


def __getattr__(name: str) -> object:
    raise ImportError(f"torchcodec shim (speechtrain bench): torchcodec.{name} is not supplied")
