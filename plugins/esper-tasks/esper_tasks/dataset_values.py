"""The input values of ``tasks.dataset``'s splits: finite, and within float32's reach.

A NaN or an infinity in one input makes every loss it touches NaN: training runs on to
the end (the governor rolls back, or the weights fill with NaN) and the run reports a
chance-level result without saying why. A finite but huge input (1e38 in float32)
comes to the same end a step later: its gradient moves the first layer's weights by
about its own size, and the next forward multiplies the two, past float32's range. Both
are found here, before training, and named by split and index: the first non-finite
input of each split, and its first float input beyond :data:`LARGEST`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from esper_core.errors import DataError
from esper_tasks.dataset_labels import MAX_ITEMS_READ

if TYPE_CHECKING:
    import torch

# The largest input magnitude trained on: its square (an input times weights that one
# step moved by about the input) is float32's largest number, 3.4e38.
LARGEST = 1.8e19
CHUNK = 4096  # samples checked at once


def _inputs(split: Any) -> tuple[Any, int]:
    """The split's inputs (a tensor of every sample, or the split itself, read item by
    item) and how many of them are checked."""
    from esper_core.env.data import TensorSplit

    if isinstance(split, TensorSplit):
        return split.inputs, len(split)
    tensors = getattr(split, "tensors", None)
    if isinstance(tensors, tuple) and len(tensors) == 2:
        return tensors[0], len(tensors[0])
    return split, min(len(split), MAX_ITEMS_READ)


def _chunks(split: Any) -> Iterator[tuple[int, torch.Tensor]]:
    """(index of the first sample, samples flattened to rows): a tensor in chunks (no copy
    of a whole split at once), a dataset one item at a time."""
    import torch

    inputs, n = _inputs(split)
    if isinstance(inputs, torch.Tensor):
        for start in range(0, n, CHUNK):
            yield start, inputs[start : start + CHUNK].reshape(min(CHUNK, n - start), -1)
    else:
        for i in range(n):
            yield i, torch.as_tensor(inputs[i][0]).reshape(1, -1)


def _scan(split: Any) -> tuple[int | None, int | None, float]:
    """(the first sample holding NaN or an infinity, the first float sample beyond
    :data:`LARGEST`, its largest value); None: none."""
    import torch

    for start, rows in _chunks(split):
        if not rows.shape[1] or not rows.is_floating_point():
            continue  # integers (token ids, counts) are finite and index embeddings
        bad = (~torch.isfinite(rows)).any(dim=1).nonzero()
        if len(bad):
            return start + int(bad[0]), None, 0.0
        size = rows.abs().amax(dim=1)
        huge = (size > LARGEST).nonzero()
        if len(huge):
            return None, start + int(huge[0]), float(size[int(huge[0])])
    return None, None, 0.0


def check_values(splits: Sequence[tuple[str, Any]], source: str) -> None:
    """Refuse, in one line naming the split and the sample, an input holding NaN or an
    infinity, or one too large to train on."""
    for name, split in splits:
        bad, huge, largest = _scan(split)
        if bad is not None:
            raise DataError(
                f"{source}: {name}[{bad}]'s input holds NaN or an infinity (the first such "
                f"sample of the {name} split); drop those samples or fill the values in"
            )
        if huge is not None:
            raise DataError(
                f"{source}: {name}[{huge}]'s input holds {largest:.3g} (the first sample of "
                f"the {name} split beyond {LARGEST:.2g}, where a training step overflows "
                "float32); scale the inputs (standardise them to mean 0, standard deviation 1)"
            )
