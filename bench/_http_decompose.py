"""Where an intake request's CPU goes, layer by layer, measured in this process on one
thread (no gunicorn, no contention): the raw boto3 calls, the service
(``pledge_submit``), and Django's whole handler (middleware, view, the one SQL query,
JSON) around the service. CPU time of this process only; DynamoDB Local's is apart."""

from __future__ import annotations

import io
import json
import time

from _common import median
from _http import PROXY_HEADERS

BODY = {"donor_ref": "D-1", "fund": "BENCH", "amount": "10.00", "currency": "USD"}


def decompose(token: str, raw_client, tables, *, n: int = 150, rounds: int = 3) -> dict:
    from _http_raw import raw_write
    from django.core.handlers.wsgi import WSGIHandler

    from reconciliation.actors import Actor, Role
    from reconciliation.claims.intake import pledge_submit
    from reconciliation.claims.models import pledge_home
    from reconciliation.claims.request import parse_fields

    handler = WSGIHandler()
    body = json.dumps(BODY).encode()
    actor = Actor(username="api:bench", role=Role.API, address="203.0.113.7")
    request = parse_fields(BODY)
    headers = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in PROXY_HEADERS.items()}

    def django(key: str) -> None:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/api/v1/pledges",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1",
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "HTTP_IDEMPOTENCY_KEY": key,
            **headers,
        }
        status: list[str] = []
        b"".join(handler(environ, lambda s, _h: status.append(s)))
        assert status[0][:3] in ("200", "201"), status

    layers = {
        "raw boto3": lambda key: raw_write(raw_client, tables, key),
        "service (pledge_submit)": lambda key: pledge_submit(
            pledge_home("bench", key),
            tenant="bench",
            idempotency_key=key,
            request=request,
            actor=actor,
        ),
        "Django handler (middleware + view + service)": django,
    }
    cpu: dict[str, dict[str, list[float]]] = {k: {"new": [], "replay": []} for k in layers}
    for round_no in range(rounds + 1):  # the first round warms up
        for name, call in layers.items():
            keys = [f"dec{round_no}-{name[:3]}-{i}" for i in range(n)]
            for kind in ("new", "replay"):
                started = time.process_time()
                for key in keys:
                    call(key)
                if round_no:
                    cpu[name][kind].append((time.process_time() - started) * 1000 / n)
    return {name: {k: median(v) for k, v in kinds.items()} for name, kinds in cpu.items()}


def decompose_lines(layers: dict) -> list[str]:
    if not layers:
        return []
    rows = []
    previous = None
    for name, m in layers.items():
        mixed = 0.8 * m["new"] + 0.2 * m["replay"]
        added = "" if previous is None else f"{mixed - previous:+.2f}"
        rows.append(f"| {name} | {m['new']:.2f} | {m['replay']:.2f} | {mixed:.2f} | {added} |")
        previous = mixed
    return [
        "",
        "Layer by layer, one thread in one process (no gunicorn, no other thread), CPU ms "
        "per request of the calling process (medians of 3 rounds):",
        "",
        "| layer | new | replay | 80/20 mix | added by the layer |",
        "| --- | ---: | ---: | ---: | ---: |",
        *rows,
    ]
