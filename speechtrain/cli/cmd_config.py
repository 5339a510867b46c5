"""speechtrain config show CFG [key=value ...]"""

from __future__ import annotations

import argparse

from speechtrain.cli.common import config_from_args


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("config", help="print the resolved config (after extends and overrides)")
    p.add_argument("action", choices=["show"], help="show: print the resolved config as YAML")
    p.add_argument("config", nargs="?", default=None, help="YAML config; omitted: the defaults")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


def run(args: argparse.Namespace) -> int:
    if args.config is not None and "=" in args.config and not args.config.endswith((".yaml", ".yml")):
        args.overrides = [args.config, *args.overrides]
        args.config = None
    cfg = config_from_args(args)
    print(cfg.to_yaml(), end="")
    return 0
