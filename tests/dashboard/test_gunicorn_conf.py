"""The shipped gunicorn settings as gunicorn itself reads them."""

from __future__ import annotations

import importlib

from gunicorn.config import Config


def _as_gunicorn_reads(monkeypatch, **env: str) -> Config:
    for name in ("GUNICORN_CONTROL_SOCKET",):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    import dashboard.gunicorn_conf as conf

    module = importlib.reload(conf)
    config = Config()
    for name in config.settings:
        if hasattr(module, name):
            config.set(name, getattr(module, name))
    return config


def test_no_two_servers_share_one_control_socket(monkeypatch):
    """gunicorn's control socket defaults to one path per user ($HOME/.gunicorn/
    gunicorn.ctl): every server on a machine (make run's, a test's, a bench's) bound it in
    turn, and its control tool spoke to whichever bound last. It is off unless a path of
    its own is given."""
    config = _as_gunicorn_reads(monkeypatch)
    assert config.control_socket_disable is True

    config = _as_gunicorn_reads(monkeypatch, GUNICORN_CONTROL_SOCKET="/run/pledges/web.ctl")
    assert config.control_socket_disable is False
    assert config.control_socket == "/run/pledges/web.ctl"
