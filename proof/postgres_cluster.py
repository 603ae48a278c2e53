"""A throwaway PostgreSQL server: ``initdb`` and ``pg_ctl`` in a temporary directory.

The tests' fixtures (tests/postgres_server.py) and the scripts that need a
server of their own (``scripts/chaos.py --postgres``) start one ``Cluster``
and make a fresh database in it per run (``create_database``). The server

* listens on a Unix socket in its own directory only (``listen_addresses = ''``):
  no TCP port, nothing reachable from outside, no clash with a system server;
* keeps ``fsync = on``: the runs are about durability, so the server must
  really write through, as a production server does;
* is stopped (``pg_ctl stop -m fast``) and its directory removed by ``stop()``.

initdb refuses to run as root, and CI runs as root: then the cluster is
created and run as the unprivileged ``postgres`` user (which Debian's
``postgresql`` package creates), through ``runuser`` (or ``setpriv``). Any
other user runs it as itself.

``unavailable()`` says why no server can be started here (no server binaries,
no psycopg, root without a ``postgres`` user). ``QUEUE_CORE_PG_BIN`` names the
directory of ``initdb`` and ``pg_ctl`` and is then the only place looked in
(``QUEUE_CORE_PG_BIN=/nonexistent`` simulates a machine without PostgreSQL).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ENV_BIN = "QUEUE_CORE_PG_BIN"
NO_BINARIES = "PostgreSQL server binaries not found (install Debian's postgresql package)"
NO_PSYCOPG = "psycopg is not installed (requirements-test.txt pins it: `make test` installs it)"
SERVER_USER = "postgres"  # the OS user a root test run starts the server as (and the database superuser)
PORT = 5432  # only names the socket file: no TCP port is opened
TOOLS = ("initdb", "pg_ctl", "postgres")
TIMEOUT = 60  # seconds for initdb, start and stop each


def candidate_bindirs() -> list[Path]:
    """Where initdb and pg_ctl may be, in order: QUEUE_CORE_PG_BIN alone if set, else PATH, then Debian's and RPM's."""
    if ENV_BIN in os.environ:
        return [Path(os.environ[ENV_BIN])]
    found = []
    on_path = shutil.which("initdb")
    if on_path:
        found.append(Path(on_path).resolve().parent)  # /usr/local/bin/initdb may be a link into the real bin/

    def version(path: Path) -> tuple[int, ...]:
        numbers = re.findall(r"\d+", path.parent.name)
        return tuple(int(n) for n in numbers)

    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"):  # Debian/Ubuntu, then PGDG RPMs
        found += sorted((p for p in Path("/").glob(pattern.lstrip("/"))), key=version, reverse=True)
    return found


def find_bindir() -> Path | None:
    """The first candidate directory that holds initdb, pg_ctl and postgres, all executable."""
    for folder in candidate_bindirs():
        if all(os.access(folder / tool, os.X_OK) and (folder / tool).is_file() for tool in TOOLS):
            return folder
    return None


def _as_server_user() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as when this process is root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam(SERVER_USER)  # KeyError: see unavailable()


def unavailable() -> str | None:
    """Why no server can be started here, or None."""
    reasons = []
    bindir = find_bindir()
    if bindir is None:
        looked = ", ".join(str(p) for p in candidate_bindirs()) or "PATH and /usr/lib/postgresql/*/bin"
        where = f"{ENV_BIN}={os.environ[ENV_BIN]}" if ENV_BIN in os.environ else looked
        reasons.append(f"{NO_BINARIES}; looked in {where}")
    if importlib.util.find_spec("psycopg") is None:
        reasons.append(NO_PSYCOPG)
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            reasons.append(f"running as root, which initdb refuses, and there is no unprivileged "
                           f"'{SERVER_USER}' user to run the server as (Debian's postgresql package creates it)")
        else:
            if shutil.which("runuser") is None and shutil.which("setpriv") is None:
                reasons.append("running as root, and neither runuser nor setpriv is there to drop to the "
                               f"'{SERVER_USER}' user")
    return "; ".join(reasons) or None


class ServerError(RuntimeError):
    """initdb, pg_ctl or the first connection failed: the message holds their output and the log's end."""


@dataclass
class Cluster:
    """One throwaway cluster: ``start()``, databases, ``stop()`` (which also removes every file)."""

    bindir: Path
    root: Path = field(init=False)  # the temporary directory: socket, log, data/
    user: pwd.struct_passwd | None = field(init=False)
    timings: dict[str, float] = field(default_factory=dict)
    # extra lines for postgresql.conf (the benchmark loads pg_stat_statements)
    settings: tuple[str, ...] = ()
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1), init=False)
    _running: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.user = _as_server_user()
        # A Unix socket's path has at most 107 bytes: a long TMPDIR would make the server refuse to start.
        base = tempfile.gettempdir()
        self.root = Path(tempfile.mkdtemp(prefix="queue-core-pg-", dir=base if len(base) <= 64 else "/tmp"))
        if self.user is not None:
            try:
                os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
            except OSError:
                shutil.rmtree(self.root, ignore_errors=True)
                raise

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def conninfo(self, dbname: str = "postgres") -> str:
        # A libpq conninfo string (psycopg.connect(conninfo)); the path holds no space or quote.
        return f"host={self.root} port={PORT} dbname={dbname} user={SERVER_USER} connect_timeout=10"

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / tool), *args]
        if self.user is not None:
            if shutil.which("runuser"):
                command = ["runuser", "-u", self.user.pw_name, "--", *command]
            else:
                command = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}",
                           "--init-groups", "--", *command]
        # cwd: a folder the server user may enter (the caller's may be private to root).
        env = {**os.environ, "LC_ALL": "C"}
        return subprocess.run(command, cwd=self.root, env=env, capture_output=True, text=True, timeout=TIMEOUT)

    def _check(self, what: str, proc: subprocess.CompletedProcess[str]) -> None:
        if proc.returncode != 0:
            raise ServerError(f"{what} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n--- server log (end) ---\n" + "\n".join(text.splitlines()[-lines:])

    def start(self) -> None:
        began = time.monotonic()
        self._check("initdb", self._run(
            "initdb", "--pgdata", str(self.data), "--username", SERVER_USER, "--auth", "trust",
            "--encoding", "UTF8", "--locale", "C"))
        # trust is safe here: the socket is in a directory only its owner (and root) may enter.
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# queue_core proofs (proof/postgres_cluster.py)\n"
                       "listen_addresses = ''\n"
                       f"unix_socket_directories = '{self.root}'\n"
                       f"port = {PORT}\n"
                       "fsync = on\n"
                       "synchronous_commit = on\n"
                       "full_page_writes = on\n"
                       + "".join(f"{line}\n" for line in self.settings))
        initialized = time.monotonic()
        self.timings["initdb"] = initialized - began
        self._running = True  # from here on, stop() must try to stop it
        self._check("pg_ctl start", self._run(
            "pg_ctl", "--pgdata", str(self.data), "--log", str(self.log), "--wait",
            "--timeout", str(TIMEOUT), "--silent", "start"))
        self._wait_for_connections()
        self.timings["start"] = time.monotonic() - initialized

    def _wait_for_connections(self) -> None:
        import psycopg

        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                with psycopg.connect(self.conninfo(), autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise ServerError(f"the server accepts no connection: {exc}{self.log_tail()}") from exc
                time.sleep(0.05)

    def create_database(self) -> str:
        """A new, empty database (test_<n>); return its name."""
        import psycopg

        name = f"test_{next(self._numbers)}"
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")  # a fresh name made here, never input
        return name

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # FORCE: a test's leftover connections

    def stop(self) -> None:
        """Stop the server (fast, else immediate, else a signal to its postmaster) and remove the directory."""
        try:
            if self._running:
                began = time.monotonic()
                stopped = False
                for mode in ("fast", "immediate"):
                    proc = self._run("pg_ctl", "--pgdata", str(self.data), "--mode", mode, "--wait",
                                     "--timeout", str(TIMEOUT), "--silent", "stop")
                    if proc.returncode == 0:
                        stopped = True
                        break
                if not stopped:
                    self._kill_postmaster()
                self._running = False
                self.timings["stop"] = time.monotonic() - began
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_postmaster(self) -> None:
        # The server this object started, by the id in its own postmaster.pid.
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGQUIT)
        except ProcessLookupError:
            return
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def url(cluster: Cluster, dbname: str) -> str:
    """A ``postgresql://`` URL of database ``dbname`` of ``cluster`` (over its Unix socket)."""
    return f"postgresql://{SERVER_USER}@/{dbname}?host={cluster.root}&port={PORT}"
