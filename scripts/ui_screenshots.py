"""Screenshots of every tab of ``speechtrain ui`` on the demo run, taken by a headless Chromium that
uses the page as a person would (clicks, waits for results): docs/ui/*.png.

    python3 scripts/ui_screenshots.py [--out docs/ui] [--workspace /tmp/speechtrain-ui-demo]

Needs the ``ui`` and ``dev`` extras and a Chromium (see speechtrain/ui/browser.py). About 3-5 minutes
on 2 CPU cores, most of it the ablation ladder.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_text(page, selector: str, text: str, timeout_s: float) -> None:  # noqa: ANN001
    """Wait until the element's text holds ``text``; an ``error:`` there stops the script."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        shown = page.locator(selector).first.inner_text()
        if text in shown:
            return
        if "error:" in shown:
            raise SystemExit(f"{selector}: {shown}")
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for '{text}' in {selector}: {page.locator(selector).first.inner_text()}")


def _fill(page, selector: str, value: str) -> None:  # noqa: ANN001
    box = page.locator(f"{selector} input, {selector} textarea").first
    box.fill(value)
    box.press("Enter") if selector.endswith(("pick", "run")) else box.blur()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs/ui")
    ap.add_argument("--workspace", default="/tmp/speechtrain-ui-demo")
    ap.add_argument("--steps", type=int, default=160, help="training steps of the demo run")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from speechtrain.ui.app import launch
    from speechtrain.ui.browser import launch_browser

    ws = Path(args.workspace)
    shutil.rmtree(ws, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    app, url = launch(port=_free_port(), runs_root=ws / "runs", data_root=ws / "data", block=False, quiet=True)
    t0 = time.monotonic()

    def shot(page, name: str) -> None:  # noqa: ANN001
        time.sleep(1.5)  # plots draw after the data arrives
        page.screenshot(path=str(out / f"{name}.png"), full_page=True)
        print(f"[{time.monotonic() - t0:5.0f}s] wrote {out / name}.png", flush=True)

    with sync_playwright() as pw:
        browser = launch_browser(pw)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#prepare", timeout=60_000)

        page.locator("#make-demo").click()
        _wait_text(page, "#data-status", "demo corpus in", 120)
        page.locator("#prepare").click()
        _wait_text(page, "#data-status", "prepared:", 300)
        shot(page, "data")

        page.get_by_role("tab", name="Recipe & switches").click()
        page.locator("#probe").click()
        _wait_text(page, "#recipe-status", "probed", 60)
        _fill(page, "#extra", "tune.steps_per_trial=1 tune.max_batch_size=8")
        page.locator("#estimate").click()
        _wait_text(page, "#recipe-status", "estimate done", 120)
        page.locator("#plan").click()
        _wait_text(page, "#recipe-status", "plan done", 120)
        shot(page, "recipe")

        page.get_by_role("tab", name="Tune").click()
        page.locator("#tune").click()
        _wait_text(page, "#tune-status", "wrote", 300)
        shot(page, "tune")

        page.get_by_role("tab", name="Train").click()
        _fill(page, "#run-name", "demo")
        _fill(page, "#max-steps", str(args.steps))
        page.locator("#start").click()
        _wait_text(page, "#run-head", "finished", 600)
        time.sleep(2.5)  # one more timer tick: the last plots and the eval audio
        shot(page, "train")

        page.get_by_role("tab", name="Bench").click()
        _fill(page, "#bench-steps", "4")
        _fill(page, "#bench-limit", "3")
        page.locator("#bench").click()
        _wait_text(page, "#bench-status", "ladder done", 900)
        shot(page, "bench")

        page.get_by_role("tab", name="Listen").click()
        _fill(page, "#listen-run", "demo")
        page.locator("#synthesize").click()
        _wait_text(page, "#listen-status", "RTF", 120)
        shot(page, "listen")

        page.get_by_role("tab", name="Runs").click()
        page.locator("#runs-refresh").click()
        time.sleep(2)
        shot(page, "runs")
        browser.close()
    app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
