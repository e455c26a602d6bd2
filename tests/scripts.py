"""Load a script of the repository (a benchmark, an example) as a module, so that a test
calls its functions instead of parsing what it prints."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.plugin_set import REPO


def load_script(relative: str) -> ModuleType:
    """``relative``: the script's path from the repository root, as the docs write it."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
