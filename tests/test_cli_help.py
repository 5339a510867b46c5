"""The command line as a newcomer meets it: a help screen written for users, and a command that asks for
what is missing instead of failing on an internal key."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speechtrain", *args], capture_output=True, text=True, timeout=120)


def test_help_opens_with_what_it_is_and_first_steps() -> None:
    out = _cli("--help")
    assert out.returncode == 0
    text = out.stdout
    description = text.split("\n\n")[1]
    assert description.startswith("Train speech models"), description
    for developer_words in ("``", "cmd_<name>", "add_parser", "subcommand lives"):
        assert developer_words not in text
    assert "first steps:" in text and "speechtrain demo" in text and "--config recipes/" in text


@pytest.mark.parametrize("command", ["train", "estimate", "bench"])
def test_a_command_without_a_recipe_asks_for_config(command: str) -> None:
    out = _cli(command)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "which recipe? pass --config recipes/NAME.yaml" in out.stderr, out.stderr
    assert "gpt_tts_tiny" in out.stderr
    assert "model.name is not set" not in out.stderr


def test_own_model_by_name_needs_no_config() -> None:
    """model.name=... alone is a complete request: it must get past the recipe question."""
    out = _cli("estimate", "model.name=toy")
    assert "which recipe?" not in out.stderr
