"""Test suite: the sidecar through its real gRPC server, PostgreSQL and Redis."""
