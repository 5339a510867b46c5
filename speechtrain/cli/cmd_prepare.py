"""speechtrain prepare DATA [--config CFG] [--workers N] [--strict] [--json REPORT] [key=value ...]"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from speechtrain.cli.common import help_from_table, write_json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "prepare",
        help="validate the data and build the feature cache (reused when nothing changed)",
        description="Validation pass (bad items are skipped and reported), then log-mel, audio and "
        "token features computed once into the cache in parallel worker processes; with --config, the model "
        "family's derived features too (XTTS: the DVAE codes of every utterance).",
    )
    p.add_argument("data", nargs="?", default=None, metavar="DATA", help="a corpus folder or metadata file")
    help_from_table(p, "data", layouts_help)
    p.add_argument(
        "--config",
        "-c",
        help="YAML config (its data.* settings are used; default: those of recipes/vits_tiny.yaml for a corpus with "
        "transcripts, recipes/vocoder_hifigan_tiny.yaml for audio alone, so that training with it reuses the cache)",
    )
    p.add_argument("--workers", "-j", type=int, default=None, help="feature processes (default: up to 8)")
    p.add_argument("--strict", action="store_true", help="any bad item is an error (exit 2) instead of a skip")
    p.add_argument("--json", metavar="REPORT", help="also write the report as JSON")
    p.add_argument("--require-text", action="store_true", help="skip items with empty text (TTS data)")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no count lines (files checked, utterances computed, time left) while it works; the stage lines "
        "stay (--quiet: none)",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="check every cached feature file against the index (size, shape) and compute the damaged ones again",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. data.n_mels=64")
    _allow_overrides_anywhere(p, takes_value=("--config", "-c", "--workers", "-j", "--json"))
    return p


def layouts_help() -> str:
    """DATA's help: every layout of the table, with what DATA points at (data.format picks one by name)."""
    from speechtrain.data.layouts import layouts

    rows = [f"{lay.name} ({lay.title}: {lay.points_at})".replace("\\|", "|") for lay in layouts()]
    return "a corpus in one of the layouts, found by its files (or data.format=NAME): " + "; ".join(rows)


_OVERRIDE = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)*=")


def _allow_overrides_anywhere(p: argparse.ArgumentParser, takes_value: tuple[str, ...]) -> None:
    """argparse cannot take positionals after options (``prepare DATA --json r.json data.n_mels=64``):
    lift ``key=value`` tokens out before parsing and hand them over as overrides."""
    parse = p.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> Any:
        tokens = list(sys.argv[1:] if args is None else args)
        rest: list[str] = []
        lifted: list[str] = []
        for i, tok in enumerate(tokens):
            after_option = i > 0 and tokens[i - 1] in takes_value
            (lifted if _OVERRIDE.match(tok) and not after_option else rest).append(tok)
        ns, extra = parse(rest, namespace)
        ns.overrides = list(getattr(ns, "overrides", None) or []) + lifted
        return ns, extra

    p.parse_known_args = parse_known_args  # type: ignore[method-assign]


def run(args: argparse.Namespace) -> int:
    from speechtrain.cli.common import user_file
    from speechtrain.config import load_config
    from speechtrain.recipes.common import find_recipe
    from speechtrain.recipes.data import DataRecipe, default_recipe

    if args.json:
        user_file(args.json)  # before the work: a folder, under a file, a run's own file
    overrides = list(args.overrides or [])
    data = args.data
    config = args.config
    if config is None and data is not None:
        probe = load_config(None, overrides).data
        config = str(find_recipe(default_recipe(str(data), probe.format, probe.encoding)))
        print(
            f"prepare: no --config: preparing with the data settings of {Path(config).name} (what training with it "
            "reads; a recipe with other data settings prepares again, and says why)",
            file=sys.stderr,
        )
    cfg = load_config(config, overrides)
    if data is not None:
        cfg.data.manifest = str(data)  # set directly: a path is not parsed as YAML
    report = DataRecipe(cfg).prepare(  # with the model family's derived features (XTTS's DVAE codes)
        workers=args.workers,
        strict=args.strict,
        progress=not args.no_progress,
        require_text=True if args.require_text else None,
        repair=args.repair,
    )
    print(report.summary())
    write_json(args.json, report.to_dict())
    return 0
