"""Esper's version, in a module of its own so the modules below the package can read it
without importing the package's ``__init__`` (which names them)."""

__version__ = "0.1.0"
