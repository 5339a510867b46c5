"""``speechtrain ui``: a web page (Gradio) over the library: prepare, tune, train, watch, bench, listen.

Gradio is an optional extra (``pip install 'speechtrain[ui]'``), imported only when the page is built.
"""

from __future__ import annotations

from typing import Any


def require_gradio() -> Any:
    """The gradio module, or a UserError that says what to install."""
    try:
        import gradio
    except ImportError:
        from speechtrain.errors import UserError

        raise UserError("the web UI needs gradio: pip install 'speechtrain[ui]' (or pip install gradio)") from None
    return gradio


def launch(**kwargs: Any) -> Any:
    """Start the page (see :func:`speechtrain.ui.app.launch`)."""
    require_gradio()
    from speechtrain.ui.app import launch as _launch

    return _launch(**kwargs)
