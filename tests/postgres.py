"""A throw-away PostgreSQL cluster for ``make test-postgres`` (docs/testing.md).

``initdb`` into a temporary folder, ``pg_ctl start`` on a free loopback port, one login
role that may create databases (pytest-django's ``test_<name>_gw0``…, and a fresh one for
each test whose processes need a database of their own), and at the end ``pg_ctl stop``
and the folder removed. Durability is off (``fsync``, ``synchronous_commit``,
``full_page_writes``): nothing here outlives the run, and a crash loses nothing anyone
needs.

The binaries are Debian's (package ``postgresql``), under ``/usr/lib/postgresql/<major>/bin``:
Debian puts only the client wrappers on ``PATH``. ``initdb`` refuses to run as root, so
under root (CI, this project's machines) the server runs as the package's ``postgres``
user (``nobody`` where there is none) and owns the folder.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
from psycopg import sql

from reconciliation.dynamo.local import free_port

ROLE = "pledges"
DATABASE = "pledges"
# A stand-in for a deployment's usual collation (en_US, case-insensitive first order), not
# the byte order of C and of SQLite: an ORDER BY on text that a page relies on shows here.
ICU_LOCALE = "en-US"
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # Two xdist workers, each with live-server threads and gunicorn processes of 2 workers
    # × 8 threads holding connections for CONN_MAX_AGE: room to spare over the default 100.
    "max_connections": "300",
}


class ClusterError(RuntimeError):
    """The cluster could not be made or started; the message says why and quotes the log."""


def bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb`` (``PG_BINDIR``
    wins; then ``PATH``, where another packaging puts it)."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = [
        path.parent
        for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")
        if path.parent.parent.name.isdigit()
    ]
    if found:
        return max(found, key=lambda folder: int(folder.parent.name))
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise ClusterError(
        "initdb not found under /usr/lib/postgresql/*/bin nor on PATH: "
        "install PostgreSQL (Debian: apt-get install postgresql) or set PG_BINDIR"
    )


def server_user() -> str | None:
    """Whom the server runs as: ``None`` (ourselves) unless we are root, whom ``initdb``
    refuses."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        return "nobody"


@dataclass(frozen=True)
class Cluster:
    root: Path  # data/, the log and the socket, all removed by stop()
    port: int
    bins: Path
    user: str | None
    superuser_password: str
    role_password: str

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = DATABASE) -> str:
        """The application role's URL of ``database`` (``DATABASE_URL``'s form)."""
        return f"postgres://{ROLE}:{self.role_password}@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        return subprocess.run(
            [*prefix, str(self.bins / tool), *args], capture_output=True, text=True, timeout=120
        )

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", "-D", str(self.data), *args)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def stop(self, *, keep_log: Path | None = None) -> None:
        """Stop the server at once (nothing in it is kept) and remove the folder; the
        server's log goes to ``keep_log`` first, if given."""
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("-m", "immediate", "-w", "stop")
        if keep_log is not None and self.log.exists():
            keep_log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.log, keep_log)
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> Cluster:
    """A new cluster, started, with the application role and its database; its
    :meth:`Cluster.url` is ready to use. The caller stops it."""
    bins = bin_dir()
    user = server_user()
    root = Path(tempfile.mkdtemp(prefix="pledges-pg-"))
    cluster = Cluster(
        root=root,
        port=free_port(),
        bins=bins,
        user=user,
        superuser_password=secrets.token_hex(16),
        role_password=secrets.token_hex(16),
    )
    try:
        _init(cluster)
        cluster = _start(cluster)
        _create_role(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _init(cluster: Cluster) -> None:
    password_file = cluster.root / "superuser-password"
    password_file.write_text(cluster.superuser_password + "\n")
    if cluster.user:
        shutil.chown(cluster.root, cluster.user)
        shutil.chown(password_file, cluster.user)
    os.chmod(cluster.root, 0o700)
    done = cluster._run(
        "initdb",
        "--pgdata",
        str(cluster.data),
        "--username",
        "postgres",
        f"--pwfile={password_file}",
        # TCP asks for passwords (as a deployment's server does); the socket, in a folder
        # only the server's user may open, trusts.
        "--auth-host=scram-sha-256",
        "--auth-local=trust",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
        "--locale-provider=icu",
        f"--icu-locale={ICU_LOCALE}",
        "--no-sync",
        "--no-instructions",
    )
    if done.returncode != 0:
        raise ClusterError(f"initdb failed:\n{done.stdout}\n{done.stderr}")
    password_file.unlink()
    conf = cluster.data / "postgresql.conf"
    lines = [f"{name} = {value}" for name, value in SETTINGS.items()]
    lines.append(f"unix_socket_directories = '{cluster.root}'")
    with conf.open("a") as out:
        out.write("\n# tests/postgres.py\n" + "\n".join(lines) + "\n")


def _start(cluster: Cluster, attempts: int = 3) -> Cluster:
    """Start on the cluster's port, or on another free one if something took it between
    ``free_port()`` and the server's bind."""
    for _ in range(attempts):
        done = cluster._pg_ctl(
            "-l", str(cluster.log), "-o", f"-p {cluster.port}", "-w", "-t", "60", "start"
        )
        if done.returncode == 0:
            return cluster
        if not re.search(r"could not bind|Address already in use", cluster.tail()):
            break
        cluster = replace(cluster, port=free_port())
    raise ClusterError(f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n{cluster.tail()}")


def _create_role(cluster: Cluster) -> None:
    admin = f"postgres://postgres:{cluster.superuser_password}@127.0.0.1:{cluster.port}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        # Not a superuser: the application's rights in a deployment, plus CREATEDB for
        # pytest-django's test databases and the per-test ones.
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(cluster.role_password)
            )
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(DATABASE), sql.Identifier(ROLE)
            )
        )


def _split(url: str) -> tuple[str, str, str]:
    """``postgres://role:pw@host:port``, the database's name, and the query string."""
    parts = re.match(r"(?P<base>postgres(?:ql)?://[^/]+)/(?P<db>[^?]*)(?P<query>.*)", url)
    if parts is None:
        raise ValueError("not a PostgreSQL URL")  # the URL holds a password: not quoted
    return parts["base"], parts["db"], parts["query"]


def create_database(url: str, name: str) -> str:
    """Create the database ``name`` on the server of ``url`` (as ``url``'s role) and
    return ``url`` naming it instead."""
    base, _, query = _split(url)
    with psycopg.connect(f"{base}/postgres{query}", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{base}/{name}{query}"


def drop_database(url: str) -> None:
    """Drop the database ``url`` names, ending whatever sessions are still in it."""
    base, name, query = _split(url)
    with psycopg.connect(f"{base}/postgres{query}", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


if __name__ == "__main__":
    # A cluster to look at by hand: python -m tests.postgres (Ctrl-C stops and removes it).
    started = start_cluster()
    print(f"DATABASE_URL={started.url()}  (folder {started.root}); Ctrl-C stops it", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        started.stop()
