"""The Gradio page: Data, Recipe & switches, Tune, Train, Bench, Listen, Runs, one module per tab
(:mod:`speechtrain.ui.tabs`), put together here.

Every handler is a thin wrapper: library calls go through :mod:`speechtrain.ui.backend`, long work
is started as the ordinary CLI in a background process (:mod:`speechtrain.ui.jobs`), runs are read
back from their directories (:mod:`speechtrain.ui.runs`). Each handler's first output is a status
line; bad input shows the same ``error: ...`` text as the CLI. Event ``api_name``s are the HTTP API
that the tests drive with gradio_client (``/prepare``, ``/start_train``, ``/run_view`` ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from speechtrain.logs import get_logger
from speechtrain.ui.hostguard import HostGuard
from speechtrain.ui.page import Inputs, Workspace, header, switch_overrides
from speechtrain.ui.tabs import bench, data, listen, recipe, runs, train, tune
from speechtrain.ui.tabs.tune import parse_trials
from speechtrain.ui.uploads import UploadLimits

__all__ = ["CSS", "Workspace", "build_app", "launch", "parse_trials", "switch_overrides"]

log = get_logger(__name__)

CSS = """
.st-error {color: #b00020; font-weight: 600}
.st-mono textarea {font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace !important}
#bench-table {overflow-x: auto}
#bench-table th, #bench-table td {word-break: normal; overflow-wrap: normal; hyphens: none}
#bench-table td {white-space: nowrap}
#bench-table td:first-child, #bench-table td:nth-child(3) {white-space: normal; min-width: 9em}
#bench-table td:last-child {white-space: normal; min-width: 22em}
/* every table: a header breaks between words only ("recomme nded"); a cell's long word (a path) breaks only when it
   cannot fit on a line of its own */
table th span.header, table th .header-content span {word-break: normal !important; overflow-wrap: normal !important;
  hyphens: none !important}
table td span, [role=gridcell] span {word-break: normal !important; overflow-wrap: break-word !important;
  hyphens: none !important}
"""
#: addresses that reach this machine only: any other --host needs a password
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def build_app(ws: Workspace) -> gr.Blocks:
    """The page: the header (recipe, dataset, format), then each tab's components, then their handlers (a tab's
    handlers may read another tab's inputs: every tab reads the Recipe tab's overrides)."""
    with gr.Blocks(title="speechtrain") as app:
        gr.Markdown("## speechtrain\nPrepare data, choose switches, tune, train, watch, benchmark and listen.")
        inputs: Inputs = header(ws)
        with gr.Tab("Data", id="data"):
            data_tab = data.layout(ws)
        with gr.Tab("Recipe & switches", id="recipe"):
            recipe_tab = recipe.layout(ws)
        inputs.switch_text, inputs.extra = recipe_tab.switch_text, recipe_tab.extra
        with gr.Tab("Tune", id="tune"):
            tune_tab = tune.layout(ws)
        with gr.Tab("Train", id="train"):
            train_tab = train.layout(ws)
        with gr.Tab("Bench", id="bench"):
            bench_tab = bench.layout(ws)
        with gr.Tab("Listen", id="listen"):
            listen_tab = listen.layout(ws)
        with gr.Tab("Runs", id="runs"):
            runs_tab = runs.layout(ws)

        data.wire(ws, data_tab, inputs)
        recipe.wire(ws, recipe_tab, inputs)
        tune.wire(ws, tune_tab, inputs)
        train.wire(ws, train_tab, inputs)
        bench.wire(ws, bench_tab, inputs)
        listen.wire(ws, listen_tab)
        runs.wire(ws, runs_tab)
        runs.reattach(app, ws, train_tab.run_pick, listen_tab.run, runs_tab)
        runs.follow(ws, train_tab.run_pick, inputs)  # the header shows the viewed run's recipe and data
        bench.reattach(app, ws, bench_tab)
    return app


def outermost(server: Any, allow_hosts: tuple[str, ...] | list[str]) -> None:
    """The Host guard around the server's whole middleware stack too: the one given to Gradio (``app_kwargs``)
    guards from the first request but sits inside Gradio's CORS middleware, which would still add
    ``access-control-allow-origin`` to the refusal; Gradio adds its middleware after ours, so the guard wraps the
    built stack once the server is up."""
    server.middleware_stack = HostGuard(server.middleware_stack or server.build_middleware_stack(), allow_hosts)


def login_message(user: str, ws: Workspace, password_from: str = "") -> str:
    """What the login page says: which server this is (speechtrain's page on this host, over which runs) and
    where its password is (it said only "Login")."""
    import html
    import socket

    where = password_from or "the one given to `speechtrain ui` (--password or $SPEECHTRAIN_UI_PASSWORD)"
    return (
        f"<p><b>speechtrain ui</b> on <b>{html.escape(socket.gethostname())}</b>: training runs in "
        f"<code>{html.escape(str(ws.runs))}</code>.</p><p>User <code>{html.escape(user)}</code>; the password is "
        f"{html.escape(where)}.</p>"
    )


def launch(
    host: str = "127.0.0.1",
    port: int | None = None,
    runs_root: str | Path = "runs",
    data_root: str | Path = "data",
    block: bool = True,
    quiet: bool = False,
    password: str | None = None,
    user: str = "speechtrain",
    allow_models: tuple[str, ...] | list[str] = (),
    also: tuple[str | Path, ...] | list[str | Path] = (),
    allow_code: tuple[str, ...] | list[str] = (),
    recipe_folders: tuple[str | Path, ...] | list[str | Path] = (),
    password_from: str = "",
    allow_hosts: tuple[str, ...] | list[str] = (),
    limits: UploadLimits | None = None,
) -> tuple[gr.Blocks, str]:
    """Build and start the page; returns the app and its local URL (``block=False`` returns at once).

    Off this machine (``host`` not in :data:`LOCAL_HOSTS`) a ``password`` is required: Gradio's login (``user``,
    ``password``) then guards the page, its API and its files; on this machine it is optional. A port already in
    use is a UserError. ``allow_models``: the ``package.module:factory`` models the page may build, ``allow_code``:
    the other config values naming code it may run (``KEY=module:function``); every other one is refused. ``also``:
    more folders whose runs the page lists; ``recipe_folders``: more folders of recipes the page lists and reads
    (besides recipes/; any other recipe file must lie under the data roots). The server serves the files the page
    shows and nothing else under ``runs_root`` and ``data_root`` (:class:`Workspace`); datasets are read under
    ``data_root`` and the uploads only, other path values of a config stay under ``runs_root`` and ``data_root``.
    ``password_from``: where the password is to be found, said on the login page (:func:`login_message`). Off this
    machine a request may not name model weights to load either (``train.quality_asr``,
    :meth:`Workspace.check_models`). On this machine the server answers loopback ``Host`` names and addresses only,
    and ``allow_hosts`` (a reverse proxy's name), with no foreign ``Origin`` (:mod:`speechtrain.ui.hostguard`: a
    rebound DNS name would otherwise drive the page from any web site the user visits). ``limits``: what one upload
    may be (:class:`speechtrain.ui.uploads.UploadLimits`)."""
    from speechtrain.errors import UserError

    if host not in LOCAL_HOSTS and not password:
        raise UserError(
            f"serving on {host} reaches other machines: it needs a password (speechtrain ui --password ..., or "
            "SPEECHTRAIN_UI_PASSWORD; `speechtrain ui` makes one and prints it when neither is given)"
        )
    ws = Workspace(
        runs_root,
        data_root,
        also=also,
        allow_models=allow_models,
        allow_code=allow_code,
        recipe_folders=recipe_folders,
        local=host in LOCAL_HOSTS,
        limits=limits,
    )
    app = build_app(ws)
    app.queue(default_concurrency_limit=4)
    guard = {"middleware": [Middleware(HostGuard, allow=tuple(allow_hosts))]} if ws.local else {}
    try:
        _, url, _ = app.launch(
            server_name=host,
            server_port=port,
            prevent_thread_lock=True,
            auth=(user, password) if password else None,
            auth_message=login_message(user, ws, password_from) if password else None,
            allowed_paths=[str(ws.shown)],
            quiet=True,
            show_error=True,
            css=CSS,
            footer_links=["api"],
            app_kwargs=guard,
            max_file_size=ws.limits.max_upload_bytes,  # refused while it arrives
        )
    except OSError as exc:
        if "Cannot find empty port" not in str(exc) and getattr(exc, "errno", None) not in (98, 48):
            raise
        which = f"port {port}" if port is not None else "every port from 7860 to 7959"
        raise UserError(
            f"{which} on {host} is in use: stop what listens there, or choose another with --port N"
        ) from None
    if ws.local:
        outermost(app.server_app, allow_hosts)
    if not quiet:
        log.info("speechtrain ui on %s (runs in %s, data in %s)", url, ws.runs, ws.data)
    if block:
        app.block_thread()
    return app, url
