"""Transport: decode a request, call one service method, encode the response."""
