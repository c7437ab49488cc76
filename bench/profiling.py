"""py-spy sampling of the sidecar process during a scenario, summarised by where the time goes."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# Where a sampled stack spends its time, judged from the innermost frame that
# matches (so psycopg called from the sidecar counts as psycopg). First match wins.
_CATEGORIES: list[tuple[str, re.Pattern[str]]] = [
    ("logging", re.compile(r"(^|[/(])logging/|durable_sidecar/logs\.py")),
    ("prometheus metrics", re.compile(r"(^|[/(])prometheus_client/")),
    ("psycopg (PostgreSQL client)", re.compile(r"(^|[/(])psycopg(_pool|_binary|_c)?/|libpq")),
    ("redis-py", re.compile(r"(^|[/(])redis/")),
    ("grpc (C core, Cython)", re.compile(r"(^|[/(])grpc/|cygrpc|grpc_core|libgrpc|grpc_")),
    ("protobuf", re.compile(r"(^|[/(])google/protobuf/|_pb2\.py|upb_|_message")),
    ("json", re.compile(r"(^|[/(])json/|_json")),
    ("hashlib, zlib", re.compile(r"hashlib|zlib|sha256|SHA256|deflate|inflate")),
    ("asyncio event loop", re.compile(r"(^|[/(])asyncio/|(^|[/(])concurrent/|(^|[/(])threading\.py|(^|[/(])selectors\.py|epoll")),
    ("sidecar transport", re.compile(r"durable_sidecar/transport/")),
    ("sidecar services", re.compile(r"durable_sidecar/services/")),
    ("sidecar stores", re.compile(r"durable_sidecar/stores/")),
    ("sidecar (other)", re.compile(r"durable_sidecar/")),
]

# Leaves that mean a thread is blocked waiting (idle), not working: dropped.
_IDLE_LEAF = re.compile(r"^(epoll_wait|epoll_pwait|poll|ppoll|select|pselect|syscall|pthread_cond_\w*wait|"
                        r"__futex\w*|futex\w*|nanosleep|clock_nanosleep|sem_\w*wait|accept4?) \(")
# Leaves inside a socket system call: the kernel's share (on 2 busy cores, often waiting for the peer to run).
_SOCKET_LEAF = re.compile(r"^(send|sendmsg|sendto|recv|recvmsg|recvfrom|write|writev|read|readv) \(")

_ENTRY = re.compile(r"durable_sidecar/(cli|__main__|app)\.py")

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::(?P<line>\d+))?\)$")


def available() -> bool:
    return _executable() is not None


def _executable() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


class Recorder:
    """`py-spy record --format raw --native` attached to a pid until `stop()`.

    Blocking sampling (the target is paused for each sample, a few per cent at
    this rate) gives consistent stacks; --native shows time spent in the C and
    Cython of grpc, psycopg and protobuf instead of charging it to the Python
    frame that called them.
    """

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        exe = _executable()
        if exe is None:
            raise RuntimeError("py-spy is not installed: run `make bench-setup`")
        self.out = out
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--native",
             "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )

    def stop(self) -> str:
        """Stops sampling and writes the output; returns what went wrong, or '' when it worked."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
        if not self.out.exists():
            lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip() and not ln.startswith("  ")]
            return (lines[0] if lines else f"py-spy exited with {self.proc.returncode}")[:300]
        return ""


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for marker in ("site-packages/", "src/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{m.group('func')} ({path})"


def _category(stack: list[str], skip: tuple[str, ...] = ()) -> str:
    if not skip and _SOCKET_LEAF.match(stack[-1]):
        # Kernel time in a socket call, named after the library that made it (asyncio streams are redis-py's).
        return f"kernel send/recv ({_category(stack[:-1], skip=('asyncio event loop',))})"
    for frame in reversed(stack):
        for name, pattern in _CATEGORIES:
            if name not in skip and pattern.search(frame):
                return name
    return "other"


def summarise(path: Path, top: int = 12) -> dict[str, Any]:
    """Share of busy samples by category (innermost match), the hottest leaves and sidecar frames (inclusive)."""
    by_category: Counter[str] = Counter()
    by_leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {"samples": 0, "categories": [], "leaves": [], "inclusive": []}
    for line in path.read_text(errors="replace").splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f.strip() for f in stack_text.split(";") if f.strip()]
        if not frames or _IDLE_LEAF.match(frames[-1]):
            continue
        total += count
        by_category[_category(frames)] += count
        by_leaf[_short(frames[-1])] += count
        # Entry frames (cli, __main__) are on every stack and say nothing.
        for name in {_short(f) for f in frames if "durable_sidecar/" in f and not _ENTRY.search(f)}:
            inclusive[name] += count

    def share(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [{"name": k, "share": round(v / total, 4)} for k, v in counter.most_common(n)] if total else []

    return {"samples": total, "categories": share(by_category, len(by_category)), "leaves": share(by_leaf, top),
            "inclusive": share(inclusive, top)}
