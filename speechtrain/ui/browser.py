"""A headless Chromium for the page's browser test and its screenshots (playwright drives it).

Looked for in this order: ``$SPEECHTRAIN_CHROMIUM``, playwright's own download
(``python3 -m playwright install chromium``), then a system Chromium or Chrome on PATH (Debian:
``apt-get install chromium``). When none is found the reason says what to install.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

INSTALL_HINT = (
    "install one: `python3 -m playwright install chromium` (playwright's own build), or the system's "
    "(Debian/Ubuntu: `apt-get install -y chromium`), or point SPEECHTRAIN_CHROMIUM at a Chromium/Chrome binary"
)
SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium(pw: object | None = None) -> tuple[str | None, str]:
    """(path of a Chromium to launch, or None for playwright's own; why) — raises RuntimeError when
    there is none, with the install hint. ``pw``: a running ``sync_playwright()`` object, if any."""
    env = os.environ.get("SPEECHTRAIN_CHROMIUM")
    if env:
        if Path(env).is_file():
            return env, f"SPEECHTRAIN_CHROMIUM={env}"
        raise RuntimeError(f"SPEECHTRAIN_CHROMIUM={env} is not a file; {INSTALL_HINT}")
    if pw is None:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise RuntimeError(
                "the browser test needs playwright: pip install -e '.[browser]' (or pip install playwright)"
            ) from None
        with sync_playwright() as p:
            own = p.chromium.executable_path
    else:
        own = pw.chromium.executable_path  # type: ignore[attr-defined]
    if own and Path(own).is_file():
        return None, f"playwright's chromium ({own})"
    for name in SYSTEM_NAMES:
        found = shutil.which(name)
        if found:
            return found, f"system browser {found}"
    raise RuntimeError(f"no headless Chromium found (playwright's is not downloaded, none on PATH); {INSTALL_HINT}")


def launch_browser(pw: object) -> object:
    """A headless Chromium from :func:`find_chromium` (``pw`` is ``sync_playwright()``'s object)."""
    path, _why = find_chromium(pw)
    # root in containers; small /dev/shm; no background connections (closed networks refuse them, slowly)
    args = [
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    return pw.chromium.launch(headless=True, executable_path=path, args=args)  # type: ignore[attr-defined]
