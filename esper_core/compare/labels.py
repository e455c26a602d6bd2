"""What a label of an experiment may be: it names a directory (``cells/TASK/POLICY/``).

Policy, task and sweep-size labels alike, so none can climb out of the experiment's
directory (``../x``), nest (``a/b``) or carry a control character.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Matched whole (fullmatch): "$" would also accept a name ending in a newline.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def label_problem(what: str) -> str | None:
    if LABEL.fullmatch(what):
        return None
    return (
        f'expected letters, digits, ".", "_" or "-" (it names a directory), got {json.dumps(what)}'
    )


def label_check(value: Any) -> str | None:
    """An options_field check: no label (None) is fine, it is derived."""
    return None if value is None else label_problem(value)
