"""The class labels of ``tasks.dataset``'s splits, held against the model and each other.

A label outside ``0..K-1`` (``K`` the model's outputs) fails inside the loss in the
middle of the first epoch (on a GPU as a device-side assert that poisons the process);
a label that validation or test holds and training never shows can never be predicted,
so it caps their accuracy without a word. Both are found here, before training.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from esper_core.errors import DataError

if TYPE_CHECKING:
    import torch

log = logging.getLogger("esper.tasks.dataset")

# Items read one by one (a dataset with neither tensors nor a ``targets`` list) to find
# the labels of a split: each read may load and transform an input, so a huge dataset is
# checked on its first items only, and the check says so.
MAX_ITEMS_READ = 20_000
SHOWN = 5  # labels named in a message


def split_labels(split: Any) -> tuple[torch.Tensor, bool]:
    """Every label of ``split`` as a flat int64 tensor, and whether that is all of them.

    Read from a TensorSplit's or TensorDataset's target tensor, or a ``targets`` attribute
    of one entry per item (torchvision's convention), else from the items themselves."""
    import torch

    from esper_core.env.data import TensorSplit

    if isinstance(split, TensorSplit):
        return split.targets.reshape(-1).to(torch.int64), True
    tensors = getattr(split, "tensors", None)
    if isinstance(tensors, tuple) and len(tensors) == 2:
        return tensors[1].reshape(-1).to(torch.int64), True
    targets = getattr(split, "targets", None)
    if targets is not None and not callable(targets):
        try:
            tensor = torch.as_tensor(targets)
        except (TypeError, ValueError, RuntimeError):
            tensor = None
        if tensor is not None and tensor.ndim >= 1 and len(tensor) == len(split):
            return tensor.reshape(-1).to(torch.int64), True
    n = min(len(split), MAX_ITEMS_READ)
    labels = [torch.as_tensor(split[i][1]).reshape(-1) for i in range(n)]
    return torch.cat(labels).to(torch.int64), n == len(split)


def _shown(values: Sequence[int]) -> str:
    head = ", ".join(str(v) for v in values[:SHOWN])
    return head + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def check_labels(splits: Sequence[tuple[str, Any]], classes: int, source: str, model: str) -> None:
    """Refuse a label outside ``0..classes-1`` in any split (one line naming the split and
    the label); warn, in one line, of labels in validation or test that training lacks."""
    seen: dict[str, set[int]] = {}
    partial: list[str] = []
    for name, split in splits:
        labels, complete = split_labels(split)
        if not complete:
            partial.append(name)
        if labels.numel() == 0:
            seen[name] = set()
            continue
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= classes:
            bad = low if low < 0 else high
            raise DataError(
                f"{source}: the {name} split holds label {bad}, but the model ({model}) has "
                f"{classes} outputs, so labels must lie in 0..{classes - 1}; renumber the "
                "labels from 0, or give the model's last layer one output per class"
            )
        seen[name] = {int(v) for v in labels.unique().tolist()}
    train = seen.get("train", set())
    for name in ("val", "test"):
        unseen = sorted(seen.get(name, set()) - train)
        if unseen:
            log.warning(
                "%s: the %s split holds label(s) %s that the train split never shows; the "
                "model cannot learn them, so they count as errors in %s accuracy",
                source,
                name,
                _shown(unseen),
                name,
            )
    if partial:
        log.warning(
            "%s: only the first %d items of the %s split(s) were checked for labels outside "
            "0..%d (give the dataset a targets list to check them all)",
            source,
            MAX_ITEMS_READ,
            ", ".join(partial),
            classes - 1,
        )
