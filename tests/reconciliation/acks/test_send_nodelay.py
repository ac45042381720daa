"""A POST's connection sends at once (TCP_NODELAY): http.client writes a request's
headers and its body apart, and with Nagle's algorithm the body waited for the
receiver's delayed ACK of the headers, 40 ms and more a POST on loopback."""

from __future__ import annotations

import socket

from reconciliation.acks.addresses import Target
from reconciliation.acks.send import _connect


def test_a_posts_connection_does_not_wait_for_acks_of_small_writes():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        target = Target(
            scheme="http", host="127.0.0.1", port=port, path="/hooks", address="127.0.0.1"
        )
        connection = _connect(target, 1.0, 1.0)
        try:
            assert connection.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            connection.close()
