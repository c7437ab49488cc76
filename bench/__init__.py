"""Benchmarks of the sidecar side by side with raw PostgreSQL, a no-op gRPC floor and DBOS Transact."""
