"""Esper core: seed lifecycle, slots, the environment loop and the plugin protocols."""

from esper_core.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["__version__", "hookimpl"]
