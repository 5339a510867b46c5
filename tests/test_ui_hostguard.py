"""The page served on 127.0.0.1 without a password answers this machine's names only: through real HTTP, a request
whose Host is a rebound DNS name (``evil.example``, same Origin: what a web page sends after DNS rebinding) gets 403
and no ``access-control-allow-origin``; a loopback Host is served; a foreign Origin is refused; ``--allow-host``
adds a name."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechtrain.ui.hostguard import host_name, is_loopback_name

pytestmark = [pytest.mark.filterwarnings("ignore:::gradio.queueing")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    from speechtrain.ui.app import launch

    root = tmp_path_factory.mktemp("hostguard")
    port = _free_port()
    app, _ = launch(
        port=port, runs_root=root / "runs", data_root=root / "data", block=False, quiet=True, allow_hosts=["proxy.lan"]
    )
    yield port
    app.close()


def _get(port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # the loopback address only
    try:
        conn.putrequest("GET", path, skip_host=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/", "/config", "/gradio_api/info"])
def test_a_rebound_host_is_refused(served: int, path: str) -> None:
    port = served
    status, headers, body = _get(port, path, {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"})
    assert status == 403
    assert "access-control-allow-origin" not in headers
    assert body.decode().startswith("error: Host 'evil.example:")


def test_a_loopback_host_is_served(served: int) -> None:
    port = served
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert _get(port, "/config", {"Host": host})[0] == 200, host
    assert _get(port, "/config", {"Host": f"localhost:{port}", "Origin": f"http://127.0.0.1:{port}"})[0] == 200
    assert _get(port, "/config", {"Host": "proxy.lan"})[0] == 200  # --allow-host


def test_a_foreign_origin_is_refused(served: int) -> None:
    port = served
    status, headers, body = _get(port, "/config", {"Host": f"127.0.0.1:{port}", "Origin": "http://evil.example"})
    assert status == 403 and b"Origin 'http://evil.example'" in body
    assert _get(port, "/config", {"Host": f"127.0.0.1:{port}", "Origin": "null"})[0] == 403
    assert _get(port, "/config", {})[0] in (400, 403)  # no Host at all (uvicorn answers 400 itself)


def test_host_names() -> None:
    assert [host_name(h) for h in ("[::1]:7860", "LocalHost:80", "127.0.0.1", "a.example.")] == [
        "::1",
        "localhost",
        "127.0.0.1",
        "a.example",
    ]
    assert all(is_loopback_name(n) for n in ("localhost", "127.0.0.2", "::1", "app.localhost"))
    assert not any(is_loopback_name(n) for n in ("evil.example", "0.0.0.0", "10.0.0.1", "localhost.evil.example", ""))


def test_served_beyond_this_machine_needs_a_password_as_before(tmp_path: Path) -> None:
    from speechtrain.errors import UserError
    from speechtrain.ui.app import launch

    with pytest.raises(UserError, match="needs a password"):
        launch(host="0.0.0.0", runs_root=tmp_path / "runs", data_root=tmp_path / "data", block=False, quiet=True)
