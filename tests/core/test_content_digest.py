"""The checkpoint content digest: equal content, equal digest; any change, a new one."""

from __future__ import annotations

import numpy as np
import torch

from esper_core.run.content_digest import content_digest


def test_equal_content_gives_equal_digests_across_copies_and_views() -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert content_digest({"w": t}) == content_digest({"w": t.clone()})
    assert content_digest({"w": t.t()}) == content_digest({"w": t.t().contiguous()})


def test_every_kind_of_change_changes_the_digest() -> None:
    base = {"w": torch.zeros(4), "n": 1, "xs": [1.0, None, True], "s": "a"}
    variants = [
        {**base, "w": torch.tensor([0.0, 0.0, 0.0, 1e-30])},  # one value
        {**base, "w": torch.zeros(2, 2)},  # shape
        {**base, "w": torch.zeros(4, dtype=torch.float64)},  # dtype
        {**base, "n": True},  # bool is not int
        {**base, "n": 1.0},  # float is not int
        {**base, "xs": (1.0, None, True)},  # tuple is not list
        {**base, "s": "b"},
        {"n": 1, "w": torch.zeros(4), "xs": [1.0, None, True], "s": "a"},  # key order
    ]
    digests = {content_digest(v) for v in variants}
    assert len(digests) == len(variants) and content_digest(base) not in digests


def test_unusual_dtypes_and_numpy_arrays() -> None:
    for t in (torch.ones(3, dtype=torch.bfloat16), torch.tensor([True, False]), torch.zeros(0)):
        assert content_digest(t) == content_digest(t.clone())
    a = np.arange(2000, dtype=np.uint32)  # repr would elide most of it
    b = a.copy()
    b[1000] += 1
    assert content_digest(a) != content_digest(b)
