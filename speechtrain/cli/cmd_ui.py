"""speechtrain ui [--host 127.0.0.1] [--port N] [--runs DIR] [--data DIR] [--password P] [--allow-model M:F]
[--allow-code KEY=M:F] [--recipes DIR] [--allow-host NAME] [--max-upload-gb GB] [--max-unpacked-gb GB]"""

from __future__ import annotations

import argparse

PASSWORD_ENV = "SPEECHTRAIN_UI_PASSWORD"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "ui",
        help="a web page to prepare, tune, train, watch, benchmark and listen (needs speechtrain[ui])",
        description="Serves a Gradio page, on this machine only unless --host says otherwise (then behind a "
        "password). Runs started there are ordinary run directories under --runs (the CLI can resume them, and the "
        "page lists runs the CLI and `speechtrain demo` started); they go on when the browser closes.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=None, help="port (default: 7860, or the next free one)")
    p.add_argument("--runs", default="runs", help="folder of run directories (default runs)")
    p.add_argument("--data", default="data", help="folder for datasets: the demo corpus (default data)")
    p.add_argument(
        "--also",
        action="append",
        default=None,
        metavar="DIR",
        help="another folder whose runs the page lists (repeatable; default: reports, where `speechtrain demo` "
        "writes its run)",
    )
    p.add_argument(
        "--recipes",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of your recipes the page lists and may read (repeatable); besides recipes/, the page reads "
        "recipe files under --data and its uploads only",
    )
    p.add_argument(
        "--password",
        default=None,
        help=f"the page's password (user 'speechtrain'); default ${PASSWORD_ENV}, else one is made and printed "
        "when --host reaches other machines (this machine only: no password unless given)",
    )
    p.add_argument(
        "--allow-model",
        action="append",
        default=[],
        metavar="MODULE:FACTORY",
        help="a model of your own the page may build (model.name=MODULE:FACTORY; repeatable). Without it the page "
        "builds the registered families only and imports no other code",
    )
    p.add_argument(
        "--allow-code",
        action="append",
        default=[],
        metavar="KEY=MODULE:FUNCTION",
        help="a config value naming code that the page may run, e.g. model.text_front_end=speechtrain.data.text."
        "amharic:g2p (repeatable; model.name=M:F is --allow-model M:F). Every other value naming code is refused",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="served on this machine, the page answers requests whose Host (and Origin) is localhost or a loopback "
        "address only; NAME adds one (a reverse proxy's name; repeatable)",
    )
    p.add_argument(
        "--max-upload-gb",
        type=float,
        default=4.0,
        metavar="GB",
        help="the largest file the page accepts as an upload (default 4; refused while it arrives)",
    )
    p.add_argument(
        "--max-unpacked-gb",
        type=float,
        default=16.0,
        metavar="GB",
        help="the most an uploaded zip may unpack to (default 16; checked from the zip's directory before anything "
        "is written, and against the free space)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    import os
    import secrets
    import socket
    from pathlib import Path

    from speechtrain.errors import UserError
    from speechtrain.ui import launch, require_gradio

    require_gradio()  # before anything imports the page: one line naming the extra, not a traceback

    if args.port is not None and not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    for name in args.allow_model:
        if ":" not in name:
            raise UserError(f"--allow-model {name}: give the model as model.name names it, MODULE:FACTORY")
    from speechtrain.ui.app import LOCAL_HOSTS
    from speechtrain.ui.backend import parse_allow_code

    allow_code = parse_allow_code(args.allow_code)  # a malformed entry stops here, before the server starts
    from speechtrain.ui.uploads import GiB, UploadLimits

    for flag, value in (("--max-upload-gb", args.max_upload_gb), ("--max-unpacked-gb", args.max_unpacked_gb)):
        if not value > 0:
            raise UserError(f"{flag} must be a positive number of GB, got {value}")

    local = args.host in LOCAL_HOSTS
    password, made = args.password or os.environ.get(PASSWORD_ENV) or None, False
    source = "the one given with --password" if args.password else f"the one in ${PASSWORD_ENV}"
    if password is None and not local:
        password, made = secrets.token_urlsafe(12), True
        source = f"the one printed once in the terminal where `speechtrain ui` started on {socket.gethostname()}"
    also = args.also if args.also is not None else ["reports"]  # listed once it exists, as runs appear there
    app, url = launch(
        host=args.host,
        port=args.port,
        runs_root=args.runs,
        data_root=args.data,
        block=False,
        quiet=True,
        password=password,
        allow_models=args.allow_model,
        also=also,
        allow_code=allow_code,
        recipe_folders=args.recipes,
        password_from=source,
        allow_hosts=args.allow_host,
        limits=UploadLimits(
            max_upload_bytes=int(args.max_upload_gb * GiB), max_unpacked_bytes=int(args.max_unpacked_gb * GiB)
        ),
    )
    port = url.rstrip("/").rsplit(":", 1)[-1]
    there = f" (from other machines: http://{socket.gethostname()}:{port}/)" if not local else ""
    print(f"speechtrain ui serving on {url}{there}", flush=True)
    print("runs in " + ", ".join(str(Path(p).resolve()) for p in [args.runs, *also]), flush=True)
    if made:
        print(f"login: user speechtrain, password {password} (made for this session, printed once)", flush=True)
    elif password is not None:
        print("login: user speechtrain, with the password given", flush=True)
    if not local:
        print(f"warning: serving on {args.host}: whoever has the password can start processes on this machine")
    try:
        app.block_thread()
    finally:
        app.close()
    return 0
