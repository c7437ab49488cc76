"""Structured logging: JSON lines carrying the request id and instance key of the current RPC."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
instance_key_var: contextvars.ContextVar[str] = contextvars.ContextVar("instance_key", default="")
namespace_var: contextvars.ContextVar[str] = contextvars.ContextVar("namespace", default="")

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.instance_key = instance_key_var.get()
        record.namespace = namespace_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line; extra= fields are kept, payloads are never passed here."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value not in ("", None):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str, fmt: str) -> None:
    """Installs the process's one handler (the application, never the library, does this)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ContextFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s %(instance_key)s] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
