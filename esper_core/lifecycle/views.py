"""Lifecycle values built from another object's fields of the same name.

``GateThresholds`` and ``SlotSettings`` name their fields after the ``LifecycleSection``
fields they copy, and ``GateInputs`` and ``SlotReport`` after the ``SlotState`` fields
they show, so each is built by copying by name plus the few fields it derives. Adding a
field to one of them is one line, and a default lives in one place: the config.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
from attrs import AttrsInstance

from esper_core.config import LifecycleSection

T = TypeVar("T", bound=AttrsInstance)


def by_name(cls: type[T], source: object, **derived: Any) -> T:
    """``cls`` with every field but ``derived`` copied from the attribute of ``source`` of that name."""
    names = (f.name for f in attrs.fields(cls))
    return cls(**{name: getattr(source, name) for name in names if name not in derived}, **derived)


def lifecycle_default(name: str) -> Any:
    """The default of ``LifecycleSection.<name>``."""
    return attrs.fields_dict(LifecycleSection)[name].default
