"""Database URLs: which backend a URL names, and the file path of an embedded one."""

from __future__ import annotations

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite://"


def sqlite_path_of(url: str) -> str:
    """The absolute file path of a sqlite:///absolute/path URL."""
    return "/" + url[len(SQLITE_SCHEME):].lstrip("/")
