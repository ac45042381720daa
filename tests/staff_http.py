"""A member of staff over real HTTP: one keep-alive connection with the cookies the server
set on it, and the sign-in form filled in as a browser fills it. For tests and benches
that drive a real server process (gunicorn), where Django's test client cannot go."""

from __future__ import annotations

import http.client
import re
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import NamedTuple
from urllib.parse import urlencode


class Reply(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    seconds: float


@dataclass
class Conn:
    """One keep-alive connection, with the cookies the server set on it. ``headers`` go
    with every request (a proxy's ``X-Forwarded-Proto``, for instance)."""

    port: int
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 30
    cookies: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def request(self, method: str, path: str, body: bytes | None = None, headers=None) -> Reply:
        sent = {**self.headers, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        for attempt in range(2):
            started = time.perf_counter()
            try:
                self.http.request(method, path, body=body, headers=sent)
                response = self.http.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed an idle keep-alive connection: reconnect once.
                self.http.close()
                if attempt:
                    raise
        seconds = time.perf_counter() - started
        for raw in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(raw).items():
                self.cookies[name] = morsel.value
        return Reply(response.status, response.headers, data, seconds)

    def close(self) -> None:
        self.http.close()


def sign_in(conn: Conn, username: str, password: str, *, before_post=None) -> Reply:
    """The sign-in form as a browser fills it: the page (its CSRF token), then the POST.
    Returns the POST's reply: 302 with a ``sessionid`` cookie when it let the person in.
    ``before_post`` is called between the two (a barrier, so many POSTs land at once)."""
    page = conn.request("GET", "/accounts/login/")
    assert page.status == 200, (page.status, page.body[:500])
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
    assert token, "no CSRF token on the sign-in page"
    form = urlencode(
        {"csrfmiddlewaretoken": token[1].decode(), "username": username, "password": password}
    ).encode()
    scheme = conn.headers.get("X-Forwarded-Proto", "http")
    if before_post is not None:
        before_post()
    return conn.request(
        "POST",
        "/accounts/login/",
        body=form,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Referer": f"{scheme}://127.0.0.1:{conn.port}/accounts/login/",
        },
    )
