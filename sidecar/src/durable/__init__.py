"""Generated gRPC code for the durable.v1 contract (see proto/)."""
