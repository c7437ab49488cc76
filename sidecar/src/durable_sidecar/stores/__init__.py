"""Stores: the only code that imports a database or cache driver; base.py is the interface, postgres/ and sqlite/ implement it."""
