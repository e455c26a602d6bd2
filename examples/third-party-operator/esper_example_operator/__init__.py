"""An example third-party growth operator: see the README."""

__all__: list[str] = []
