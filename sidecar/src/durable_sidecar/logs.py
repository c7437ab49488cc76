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
    """The call's request id, instance key and namespace on every line; a line logged outside a call (a sweep
    that suspends an instance, say) names its instance with extra= instead, which is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in (("request_id", request_id_var), ("instance_key", instance_key_var),
                          ("namespace", namespace_var)):
            if not getattr(record, name, ""):
                setattr(record, name, var.get())
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


class TextFormatter(logging.Formatter):
    """A line for people: time, level, logger, [request id instance key], the message, then the extra= fields
    as key=value (the method, code and error of a refused call, say), as the JSON lines carry them."""

    _CONTEXT = frozenset({"request_id", "instance_key", "namespace"})

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s %(instance_key)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = [f"{key}={value}" if " " not in str(value) else f"{key}={json.dumps(str(value))}"
                  for key, value in vars(record).items()
                  if key not in _STANDARD and key not in self._CONTEXT and value not in ("", None)]
        if not extras:
            return line
        head, sep, tail = line.partition("\n")  # a traceback stays below the line
        return f"{head} {' '.join(extras)}{sep}{tail}"


def configure(level: str, fmt: str) -> None:
    """Installs the process's one handler (the application, never the library, does this)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ContextFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
