"""Shared set-up for the benchmarks: an own DynamoDB Local, Django configured against it,
round-trip counting, and writing a result section into docs/benchmarks.md."""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "benchmarks.md"


def start_engine(port: int | None = None):
    """DynamoDB Local on ``port`` (a free one by default: a bench that sets its
    children's environment before the engine runs names the port first), and Django in
    this process against it, its tables made."""
    from reconciliation.dynamo.local import start_dynamodb_local

    engine = start_dynamodb_local(port)
    os.environ["DYNAMODB_ENDPOINT_URL"] = engine.endpoint_url
    os.environ.setdefault("DDB_TABLE_PREFIX", "bench-")
    # Seeding 100 000 items keeps DynamoDB Local busy; a bench is not a request path.
    os.environ.setdefault("DDB_READ_TIMEOUT_S", "30")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from reconciliation.dynamo.client import dynamodb_client, table_names
    from reconciliation.dynamo.tables import ensure_tables

    ensure_tables(dynamodb_client(), table_names())
    return engine


class RoundTrips:
    """Counts HTTP requests a client sends (SDK retries included)."""

    def __init__(self, client):
        self.count = 0
        client.meta.events.register("before-send.dynamodb", self._seen)

    def _seen(self, **_kwargs):
        self.count += 1


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def median(values: list[float]) -> float:
    return statistics.median(values)


def write_section(name: str, body: str) -> None:
    """Replace the ``<!-- bench:name -->`` section of docs/benchmarks.md with ``body``."""
    DOC.parent.mkdir(exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _m: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    DOC.write_text(text)


def machine_line() -> str:
    import platform

    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d', time.gmtime())}"
    )


class LatencyProxy:
    """A loopback TCP proxy that delays every chunk by ``one_way_ms`` in each direction,
    modelling the network hop to a real DynamoDB endpoint (DynamoDB Local answers over
    loopback in microseconds, which hides what a round trip costs in production)."""

    def __init__(self, target_port: int, one_way_ms: float):
        import asyncio
        import threading

        self.target_port = target_port
        self.delay = one_way_ms / 1000
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()

        async def pipe(reader, writer):
            queue: asyncio.Queue = asyncio.Queue()

            async def pump():
                while True:
                    due, data = await queue.get()
                    if data is None:
                        writer.close()
                        return
                    wait = due - self.loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    writer.write(data)
                    await writer.drain()

            task = self.loop.create_task(pump())
            try:
                while data := await reader.read(65536):
                    queue.put_nowait((self.loop.time() + self.delay, data))
            except ConnectionError:
                pass
            queue.put_nowait((0, None))
            await task

        async def handle(client_reader, client_writer):
            try:
                server_reader, server_writer = await asyncio.open_connection(
                    "127.0.0.1", self.target_port
                )
            except OSError:
                client_writer.close()
                return
            await asyncio.gather(
                pipe(client_reader, server_writer),
                pipe(server_reader, client_writer),
                return_exceptions=True,
            )

        async def start():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await server.serve_forever()

        self.thread = threading.Thread(
            target=lambda: self.loop.run_until_complete(start()), daemon=True
        )
        self.thread.start()
        ready.wait(10)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
