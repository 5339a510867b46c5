"""speechtrain ui [--host 127.0.0.1] [--port N] [--runs DIR] [--data DIR]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "ui",
        help="a web page to prepare, tune, train, watch, benchmark and listen (needs speechtrain[ui])",
        description="Serves a Gradio page, on this machine only unless --host says otherwise. Runs started "
        "there are ordinary run directories under --runs (the CLI can resume them, and the page lists runs "
        "the CLI started); they go on when the browser closes.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=None, help="port (default: 7860, or the next free one)")
    p.add_argument("--runs", default="runs", help="folder of run directories (default runs)")
    p.add_argument(
        "--data", default="data", help="folder for datasets: the demo corpus, unpacked uploads (default data)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.errors import UserError
    from speechtrain.ui import launch

    if args.port is not None and not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}: anyone who can reach it can start processes on this machine")
    launch(host=args.host, port=args.port, runs_root=args.runs, data_root=args.data)
    return 0
