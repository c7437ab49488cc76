"""A free local port for a server the caller starts next: the one helper e2e/, tests/ and bench/ share (stdlib only)."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def _ephemeral_low() -> int:
    """The lowest local port the kernel gives outgoing connections (ip_local_port_range; 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing is bound to, below the range the kernel draws outgoing connections' local ports from.

    bind(0) answers from that range, so a connection opened before the server starts (make run's n8n
    CLI imports take minutes and open many) could take the port as its local port, and the server then
    fails with "port already in use". Ports below the range are never handed out that way.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1025, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken (a listener, a socket in TIME_WAIT)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
