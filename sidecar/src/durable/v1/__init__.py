"""Generated code for package durable.v1: do not edit; run `make proto`."""
