"""Durable state sidecar for n8n: checkpoints, idempotency keys and versions over gRPC."""

__version__ = "0.1.0"
