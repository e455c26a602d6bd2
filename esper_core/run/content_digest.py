"""A SHA-256 digest of a checkpoint's content: every tensor's bytes and every plain value.

The digest is stored inside the checkpoint it describes and recomputed after loading,
so a checkpoint whose bytes changed on disk (flipped bits in tensor data, a damaged
pickle that still unpickles) is refused instead of resumed with wrong weights. It lives
in the same file as the data because two files cannot be replaced atomically together:
a digest in ``checkpoint.json`` would, after a kill between the two renames, describe a
checkpoint that is not there and condemn the intact one that is.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

DIGEST_KEY = "content_sha256"


def content_digest(value: Any) -> str:
    """Hex SHA-256 of ``value``: dicts (in order), lists, tuples, scalars, strings, tensors."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    import torch

    # Every value starts with a tag and its length, so no two structures feed the same bytes.
    if isinstance(value, torch.Tensor):
        data = value.detach().to("cpu").contiguous().reshape(-1)
        header = f"T{data.dtype}{tuple(value.shape)}".encode()
        digest.update(struct.pack("<Q", len(header)) + header)
        if data.numel():
            digest.update(data.view(torch.uint8).numpy().data)
    elif isinstance(value, dict):
        digest.update(b"D" + struct.pack("<Q", len(value)))
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, list | tuple):
        digest.update((b"L" if isinstance(value, list) else b"U") + struct.pack("<Q", len(value)))
        for item in value:
            _feed(digest, item)
    elif hasattr(value, "__array_interface__"):  # a numpy array (repr would elide values)
        import numpy as np

        array = np.ascontiguousarray(value)
        header = f"A{array.dtype.str}{array.shape}".encode()
        digest.update(struct.pack("<Q", len(header)) + header)
        digest.update(array.data)
    elif isinstance(value, bytes | bytearray):
        digest.update(b"B" + struct.pack("<Q", len(value)) + bytes(value))
    else:
        # str, int, float (repr round-trips exactly), bool, None, torch.dtype, ...
        text = f"{type(value).__name__}:{value!r}".encode("utf-8", "surrogatepass")
        digest.update(b"S" + struct.pack("<Q", len(text)) + text)
