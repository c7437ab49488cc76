"""The embedded storage backend: SQLite through the standard library, one file owned by one sidecar process."""
