"""Esper growth operators: see the README and esper_core.components.growth_operator."""

__all__: list[str] = []
