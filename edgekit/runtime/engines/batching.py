"""Several sequences' KV states as the rows of one batch: left padding, masks, repacking. numpy only.

KV arrays are (rows, kv_heads, cells, head_dim). A row holds its sequence's `length` real cells at the
end of the cells axis, after `cells - length` cells of padding that its attention mask hides; every
step appends one cell to every row, so the real cells stay contiguous at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CELLS_AXIS = 2


@dataclass
class Batch:
    rows: list[int]  # sequence ids, in row order
    slot: Any  # the backend's slot holding the rows' KV state
    cells: int  # KV cells per row, padding included


def pack(parts: Sequence[tuple[dict[str, np.ndarray], int]]) -> tuple[dict[str, np.ndarray], int]:
    """One batch from rows: each part is (KV arrays of one row, its real length; the real cells are the last
    `length` of the part's cells). Every row is left-padded with zeros to the longest real length, so padding
    that no row needs any more is dropped. Returns the arrays and their cells per row."""
    cells = max(length for _, length in parts)
    names = parts[0][0].keys()
    out: dict[str, np.ndarray] = {}
    for name in names:
        first = parts[0][0][name]
        shape = list(first.shape)
        shape[0], shape[CELLS_AXIS] = len(parts), cells
        packed = np.zeros(shape, dtype=first.dtype)
        for row, (arrays, length) in enumerate(parts):
            source = arrays[name]
            if length:
                packed[row, :, cells - length :] = source[0, :, source.shape[CELLS_AXIS] - length :]
        out[name] = packed
    return out, cells


def attention_mask(lengths: Sequence[int], cells: int, new: int) -> np.ndarray:
    """(rows, cells + new) int64: 1 over each row's real cells and the `new` tokens, 0 over its padding."""
    mask = np.zeros((len(lengths), cells + new), dtype=np.int64)
    for row, length in enumerate(lengths):
        mask[row, cells - length :] = 1
    return mask
