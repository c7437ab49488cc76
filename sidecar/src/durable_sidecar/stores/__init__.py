"""Stores: the only code that imports a database or cache driver."""
