"""``tasks.dataset``'s ImageFolder data: ``train/``, ``val/`` and ``test/`` under one
directory, one folder per class in each, read through torchvision."""

from __future__ import annotations

from typing import Any

from esper_core.errors import DataError

SPLITS = ("train", "val", "test")


def image_folder_splits(root: str, size: int) -> tuple[Any, Any, Any]:
    """The train, val and test ``ImageFolder`` datasets under ``root``, images resized to
    ``size`` x ``size``; one line naming what is missing or unreadable."""
    from pathlib import Path

    from torchvision import datasets, transforms

    missing = [s for s in SPLITS if not (Path(root) / s).is_dir()]
    if missing:
        raise DataError(
            f"tasks.dataset.image_folder: {root} lacks {', '.join(m + '/' for m in missing)}; it needs "
            "train/, val/ and test/ subdirectories, one folder per class in each"
        )
    tf = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor()])
    folders = []
    for split in SPLITS:
        try:
            folder = datasets.ImageFolder(str(Path(root) / split), transform=tf, loader=_open_image)
        except FileNotFoundError as exc:  # a split without any image
            raise DataError(f"tasks.dataset.image_folder: {exc}") from None
        folders.append(folder)
    classes = [f.classes for f in folders]
    if any(c != classes[0] for c in classes):
        # ImageFolder numbers classes by folder name in each split: a class missing from
        # one split silently shifts the labels of every class after it.
        shown = "; ".join(f"{s}: {', '.join(c)}" for s, c in zip(SPLITS, classes))
        raise DataError(
            f"tasks.dataset.image_folder: {root}'s splits hold different class folders "
            f"({shown}); give train/, val/ and test/ the same class folders"
        )
    return folders[0], folders[1], folders[2]


def _open_image(path: str) -> Any:
    """torchvision's loader, naming the file that cannot be read (an empty or corrupt one)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with open(path, "rb") as fh:
            image = Image.open(fh)
            return image.convert("RGB")
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(
            f"tasks.dataset.image_folder: cannot read the image {path} ({exc}); remove or "
            "replace it"
        ) from None
