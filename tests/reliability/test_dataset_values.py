"""NaN or infinite inputs in tasks.dataset (all NaN, one NaN, +inf,
1e38, NaN in validation only) trained to the end without a word; each is refused when
the task is built, in one line naming the split and the first bad sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper_core.errors import DataError
from esper_core.plugins import PluginManager
from tests.plugins.esper_tasks.test_dataset_task import MODULE, _run


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("all_nan", "train[0]'s input holds NaN or an infinity"),
        ("one_nan", "train[7]'s input holds NaN or an infinity"),
        ("one_inf", "train[3]'s input holds NaN or an infinity"),
        ("huge_input", "train[11]'s input holds 1e+38"),
        ("nan_in_validation", "val[4]'s input holds NaN or an infinity"),
    ],
)
def test_non_finite_or_huge_inputs_are_refused_in_one_line(
    pm: PluginManager, tmp_path: Path, data: str, message: str
) -> None:
    with pytest.raises(DataError) as info:
        _run(pm, tmp_path, data=f"{MODULE}:{data}")
    assert message in str(info.value) and "\n" not in str(info.value), info.value
    assert not (tmp_path / "r").exists()
