"""SIGTERM and SIGINT stop training at the next step boundary (after a checkpoint) instead of killing it.

The Trainer writes the stop checkpoint while the handlers are still installed: a second signal (an impatient
Ctrl-C, a scheduler's repeated SIGTERM) is counted and waits for the save to finish instead of cutting it short.
Once a stop is under way (:func:`stop_under_way`), a command's own handler (``speechtrain``'s, which raises
KeyboardInterrupt) lets further signals pass too while the run winds down: raised there, the KeyboardInterrupt
lands wherever the interpreter is, a finaliser included ("Exception ignored in ... __del__", a cache reader's
lease left behind).
"""

from __future__ import annotations

import signal
from types import FrameType, TracebackType
from typing import Any

_stopping = {"signals": 0}  # signals received since a training loop began stopping for one (0: none)


def stop_under_way() -> bool:
    """A training loop stopped for a signal in this process (since :func:`stop_finished`)."""
    return _stopping["signals"] > 0


def absorb_signal() -> int:
    """Count one more signal that came while a stop is under way; how many came since the first."""
    _stopping["signals"] += 1
    return _stopping["signals"] - 1


def peer_stopped() -> None:
    """A training loop stops because another rank received a signal: the same wind-down as for one of its own
    (torchrun signals every worker, and the signal may reach this one after the agreement)."""
    _stopping["signals"] = max(_stopping["signals"], 1)


def stop_finished() -> None:
    """The command that stopped is over: signals are signals again."""
    _stopping["signals"] = 0


class StopSignals:
    """While entered, SIGTERM/SIGINT only set :attr:`received`; the previous handlers come back on exit.

    Outside the main thread (where handlers cannot be installed) nothing changes.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: int | None = None
        self.count = 0  # signals received (the first decides; later ones only wait)
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        self.count += 1
        absorb_signal()
        if self.received is None:
            self.received = signum

    @property
    def reason(self) -> str | None:
        """``"signal SIGTERM"`` (or SIGINT) once one arrived, else None."""
        return None if self.received is None else f"signal {signal.Signals(self.received).name}"

    def __enter__(self) -> StopSignals:
        for sig in self.SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
