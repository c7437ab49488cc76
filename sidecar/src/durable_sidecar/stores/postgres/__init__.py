"""The production storage backend: PostgreSQL through psycopg 3 and its pool."""
