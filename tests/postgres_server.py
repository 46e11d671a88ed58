"""A throwaway PostgreSQL server on loopback for the tests, installed from Debian packages if missing."""
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class Unavailable(RuntimeError):
    """PostgreSQL cannot be installed or started here; the message says why."""


def _binaries() -> Path | None:
    """The directory of initdb and pg_ctl: Debian's newest, else one on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _install() -> None:
    """apt-get install postgresql, as root; Unavailable with the reason if that cannot be done."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("PostgreSQL is not installed, and installing it needs apt-get as root")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"]):
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise Unavailable(f"{' '.join(command)} failed: {(done.stderr or done.stdout).strip()[-300:]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """initdb in a temporary directory, then a server listening on 127.0.0.1 only, trusting local
    connections. PostgreSQL refuses to run as root, so as root it runs as the postgres user."""

    def __init__(self):
        self.bin = _binaries()
        if self.bin is None:
            _install()
            self.bin = _binaries()
            if self.bin is None:
                raise Unavailable("apt-get installed postgresql, but no initdb was found")
        self.directory = Path(tempfile.mkdtemp(prefix="tuner-postgres-"))
        self.data, self.port = self.directory / "data", _free_port()
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres" if _user_exists("postgres") else "nobody"
            os.chmod(self.directory, 0o755)
            shutil.chown(self.directory, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "tuner", "--auth=trust", "-E", "UTF8")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "log"), "-w", "-t", "120", "-o",
                  f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c max_connections=200",
                  "start")
        self._created = 0

    def _run(self, program: str, *arguments: str) -> None:
        command = [str(self.bin / program), *arguments]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=self.directory)
        if done.returncode != 0:
            log = self.directory / "log"
            raise Unavailable(f"{program} failed: {(done.stderr or done.stdout).strip()[-300:]}"
                              + (f"; server log: {log.read_text()[-300:]}" if log.exists() else ""))

    def database(self) -> str:
        """The URL of a new, empty database on the server."""
        import psycopg

        self._created += 1
        name = f"tuner{self._created}_{int(time.time() * 1000) % 10**8}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user="tuner", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return f"postgresql://tuner@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
