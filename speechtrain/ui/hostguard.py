"""The page served on this machine answers this machine's names only.

Served on a loopback address, the page trusts whoever reaches it (no password by default). A web page the user
visits can still reach it by DNS rebinding: its own name (``evil.example``) is made to resolve to 127.0.0.1, and the
browser then sends ``Host: evil.example:7860`` with ``Origin: http://evil.example:7860`` (same origin to the
browser, so Gradio's CORS check lets it through). :class:`HostGuard` answers a request only when its ``Host`` is a
loopback name or address (or one the operator allowed, ``speechtrain ui --allow-host NAME``) and its ``Origin``, when
sent, is one of those too; anything else gets 403 before Gradio sees it. An ASGI middleware of its own (not
Starlette's BaseHTTPMiddleware) so that websocket and streamed requests pass through the same check.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HostGuard", "host_name", "is_loopback_name"]

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

#: names that reach this machine only, whatever DNS says (RFC 6761: ``localhost`` and ``*.localhost``)
LOOPBACK_NAMES = ("localhost",)


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header value (``[::1]:7860`` -> ``::1``, ``Example:80`` -> ``example``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return host.rstrip(".")


def is_loopback_name(name: str) -> bool:
    """``localhost``, ``*.localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostGuard:
    """ASGI middleware: 403 for a request whose ``Host`` or ``Origin`` names neither this machine nor an allowed
    host (``allow``: names as ``--allow-host`` gives them, compared without port and case)."""

    def __init__(self, app: ASGIApp, allow: Iterable[str] = ()) -> None:
        self.app = app
        self.allow = {host_name(a) for a in allow if a}

    def allowed(self, name: str) -> bool:
        return bool(name) and (is_loopback_name(name) or name in self.allow)

    def refusal(self, headers: dict[str, str]) -> str | None:
        """Why a request with these headers is refused, or None."""
        host = host_name(headers.get("host", ""))
        if not self.allowed(host):
            return f"Host {headers.get('host', '(none)')!r} is not this machine"
        origin = headers.get("origin")
        if origin is not None and not self.allowed(host_name(urlsplit(origin).netloc)):
            return f"Origin {origin!r} is not this machine"
        return None

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        why = self.refusal(headers)
        if why is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (
            f"error: {why}: the speechtrain page served on this machine answers localhost and loopback addresses "
            "only (speechtrain ui --allow-host NAME adds a name)\n"
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})
