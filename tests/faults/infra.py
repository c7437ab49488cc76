"""Fault-injection tools the tests own: a throwaway PostgreSQL cluster, a loopback TCP proxy, invariants."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sidecar.helpers import free_port
from tests.sidecar.storage import fetch_sync

PG_BIN = Path(os.environ.get("DURABLE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; CI and sessions run as root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


class ThrowawayPostgres:
    """A PostgreSQL cluster of the test's own (initdb on a free port), so the shared one is never touched."""

    def __init__(self, *, max_connections: int = 50) -> None:
        assert (PG_BIN / "initdb").exists(), f"PostgreSQL binaries not found in {PG_BIN} (set DURABLE_TEST_PG_BIN)"
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="durable-pg-"))
        self.data = self.root / "data"
        self.max_connections = max_connections
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                                     "-E", "UTF8", "--no-sync"]), check=True, capture_output=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                f"-c max_connections={self.max_connections} -c superuser_reserved_connections=0 -c fsync=on")
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts, "-w", "-t", "30",
                                     "-l", str(self.root / "log"), "start"]), check=True, capture_output=True)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30",
                                     "stop"]), check=False, capture_output=True)

    def kill9(self) -> None:
        """Crash the postmaster and its children like a power cut of the process tree."""
        pid_file = self.data / "postmaster.pid"
        pid = int(pid_file.read_text().split()[0])
        subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()

    def cleanup(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres(**kw: int) -> Iterator[ThrowawayPostgres]:
    pg = ThrowawayPostgres(**kw)
    pg.start()
    try:
        yield pg
    finally:
        pg.cleanup()


@dataclass
class TcpProxy:
    """A loopback TCP proxy in its own thread that can add latency, drop everything, or reset on a pattern.

    `reset_after` resets both sides right after forwarding client bytes that contain the
    pattern, before the server's answer can reach the client: with b"COMMIT" that is the
    ambiguous-commit case (the server committed; the client never heard).
    """

    target_port: int
    port: int = field(default_factory=free_port)
    latency_s: float = 0.0
    refusing: bool = False
    reset_after: bytes | None = None
    resets: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.AbstractServer | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name="tcp-proxy", daemon=True).start()
        ready.wait(10)

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def close() -> None:
            for w in list(self._writers):
                w.transport.abort()
            if self._server:
                self._server.close()
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)

    def drop_all(self) -> None:
        """Abort every open connection (both directions) at once."""
        assert self._loop is not None

        async def drop() -> None:
            for w in list(self._writers):
                w.transport.abort()

        asyncio.run_coroutine_threadsafe(drop(), self._loop).result(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        cut = asyncio.Event()  # set once the pattern passed: the server's answer must never arrive

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, client_side: bool) -> None:
            try:
                while data := await src.read(65536):
                    if self.latency_s:
                        await asyncio.sleep(self.latency_s)
                    if cut.is_set():
                        continue
                    dst.write(data)
                    await dst.drain()
                    if client_side and self.reset_after is not None and self.reset_after in data:
                        self.reset_after = None  # one shot
                        self.resets += 1
                        cut.set()
                        await asyncio.sleep(0.05)  # let the server act on it, but not answer
                        writer.transport.abort()
                        up_writer.transport.abort()
                        return
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        try:
            await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))
        finally:
            self._writers -= {writer, up_writer}


def check_invariants(database_url: str) -> list[str]:
    """Nothing half-visible: each instance's counters agree with its checkpoint rows (either backend); a purged
    instance (PurgeInstance) keeps its last sequence with no rows left."""
    problems = []
    rows = fetch_sync(
        database_url,
        """SELECT i.namespace, i.workflow_id, i.instance_key, i.last_sequence, i.checkpoint_count,
                  coalesce(max(c.sequence), 0) AS max_seq, count(c.sequence) AS n,
                  EXISTS (SELECT 1 FROM durable_instance_events e
                          WHERE e.namespace = i.namespace AND e.workflow_id = i.workflow_id
                            AND e.instance_key = i.instance_key AND e.kind = 'purged') AS purged
           FROM durable_instances i
           LEFT JOIN durable_checkpoints c USING (namespace, workflow_id, instance_key)
           GROUP BY 1, 2, 3, 4, 5""",
    )
    for ns, wf, key, last, count, max_seq, n, purged in rows:
        if (last != max_seq and not (purged and n == 0)) or count != n:
            problems.append(f"{ns}/{wf}/{key}: last_sequence={last} checkpoint_count={count} "
                            f"but rows max={max_seq} count={n}")
    return problems
