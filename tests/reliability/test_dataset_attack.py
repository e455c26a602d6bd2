"""tasks.dataset attacked: items of the wrong type, splits of
different input shapes or class folders, an empty or corrupt image, a model whose output
has no class dimension: each one line naming what is wrong, before training starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper_core.errors import ConfigError, DataError, EsperError
from esper_core.plugins import PluginManager
from tests.plugins.esper_tasks.test_dataset_task import MODULE, _run


@pytest.mark.parametrize(
    ("extra", "data", "error", "message"),
    [
        ((), f"{MODULE}:strings", DataError, "its input is a str, not a tensor"),
        ((), f"{MODULE}:float_targets", DataError, "a target is a class index"),
        ((), f"{MODULE}:mixed_shapes", DataError, "the splits' inputs differ in shape"),
        (
            (f"tasks.dataset.model={MODULE}:scalar_cnn",),
            f"{MODULE}:splits",
            ConfigError,
            "returns no [batch, classes]",
        ),
    ],
)
def test_wrong_items_and_models_are_one_line(
    pm: PluginManager,
    tmp_path: Path,
    extra: tuple[str, ...],
    data: str,
    error: type[EsperError],
    message: str,
) -> None:
    with pytest.raises(error) as info:
        _run(pm, tmp_path, *extra, data=data)
    assert message in str(info.value) and "\n" not in str(info.value), info.value


def _images(root: Path, classes: dict[str, tuple[str, ...]]) -> None:
    from PIL import Image

    for split, labels in classes.items():
        for label in labels:
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(folder / f"{i}.png")


FOLDER = ["tasks.dataset.image_size=8", "env.max_epochs=1"]


@pytest.mark.parametrize("bad", [b"", b"\x89PNG not really"], ids=["empty", "corrupt"])
def test_an_unreadable_image_is_named(pm: PluginManager, tmp_path: Path, bad: bytes) -> None:
    root = tmp_path / "images"
    _images(root, {s: ("a", "b") for s in ("train", "val", "test")})
    (root / "train" / "b" / "broken.png").write_bytes(bad)
    with pytest.raises(DataError) as info:
        _run(pm, tmp_path, f"tasks.dataset.image_folder={root}", *FOLDER, data="")
    message = str(info.value)
    assert "cannot read the image" in message and "broken.png" in message, message


def test_splits_with_different_class_folders_are_refused(pm: PluginManager, tmp_path: Path) -> None:
    root = tmp_path / "images"
    _images(root, {"train": ("a", "b", "c"), "val": ("a", "c"), "test": ("a", "b", "c")})
    with pytest.raises(DataError, match="splits hold different class folders"):
        _run(pm, tmp_path, f"tasks.dataset.image_folder={root}", *FOLDER, data="")


def test_a_split_without_images_is_one_line(pm: PluginManager, tmp_path: Path) -> None:
    root = tmp_path / "images"
    _images(root, {"train": ("a", "b"), "val": ("a", "b")})
    (root / "test" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match=r"tasks\.dataset\.image_folder: "):
        _run(pm, tmp_path, f"tasks.dataset.image_folder={root}", *FOLDER, data="")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            f"{MODULE}:label_past_the_outputs",
            "the val split holds label 4, but the model (tasks.dataset.model "
            f"{MODULE}:small_cnn) has 4 outputs, so labels must lie in 0..3",
        ),
        (f"{MODULE}:negative_label", "the test split holds label -1, but the model"),
    ],
    ids=["past-the-outputs", "negative-item-by-item"],
)
def test_a_label_outside_the_models_outputs_is_refused_before_training(
    pm: PluginManager, tmp_path: Path, data: str, message: str
) -> None:
    """Before: IndexError "Target 4 is out of bounds" from inside the loss, mid-epoch."""
    with pytest.raises(DataError) as info:
        _run(pm, tmp_path, data=data)
    text = str(info.value)
    assert message in text and "renumber the labels" in text and "\n" not in text, text
    assert not (tmp_path / "r" / "checkpoint.pt").exists()


def test_labels_that_train_never_shows_are_named(
    pm: PluginManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A class only validation and test hold cannot be learned: the run goes on (it may be
    meant, a rare class), and one line says which labels and why accuracy suffers."""
    with caplog.at_level("WARNING", logger="esper.tasks.dataset"):
        summary = _run(pm, tmp_path, data=f"{MODULE}:label_missing_from_train")
    assert summary["episodes_completed"] == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "esper.tasks.dataset"]
    assert any(
        "the val split holds label(s) 3 that the train split never shows" in m for m in lines
    )
    assert any("the test split holds label(s) 3" in m for m in lines), lines
    assert all("\n" not in m for m in lines)


def test_matching_label_sets_say_nothing(
    pm: PluginManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="esper.tasks.dataset"):
        _run(pm, tmp_path, data=f"{MODULE}:item_splits")
    assert not [r for r in caplog.records if r.name == "esper.tasks.dataset"]
