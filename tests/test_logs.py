"""speechtrain's log handler: plain messages on the *current* standard error, wherever that is now."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from speechtrain.logs import setup_logging


def test_a_message_goes_to_todays_stderr_after_yesterdays_was_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process set up its logging while stderr was a stream that has been closed since (a test's capture, a
    redirected file that ended): the next message goes to the stderr of now, and logging raises nothing (before:
    ValueError 'I/O operation on closed file' from flushing the old stream)."""
    logger = logging.getLogger("speechtrain")
    kept = (list(logger.handlers), logger.level, logger.propagate)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    try:
        raw = io.BytesIO()
        old = io.TextIOWrapper(raw, encoding="utf-8")  # as a capture's file: flushing it once closed raises
        monkeypatch.setattr(sys, "stderr", old)
        setup_logging().info("first")
        old.flush()
        assert raw.getvalue() == b"first\n"
        old.close()
        now = io.StringIO()
        monkeypatch.setattr(sys, "stderr", now)
        logging.getLogger("speechtrain.test").info("second")
        assert now.getvalue() == "second\n"
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in kept[0]:
            logger.addHandler(handler)
        logger.setLevel(kept[1])
        logger.propagate = kept[2]
