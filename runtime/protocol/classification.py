"""Triton's classification extension: the top-k classes of an output as BYTES strings.

Each string is ``<value>:<index>[:<label>]`` with the value printed as C++ ``std::to_string``
prints it (``%f`` for floats, plain integers otherwise), as Triton does. A batched output gets
shape ``[batch, k]``, otherwise ``[k]``; ``k`` is at most the number of classes per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cachefleet.runtime.tensor import Tensor, encode_bytes_elements


def classify(tensor: Tensor, count: int, labels: Sequence[str], *, batched: bool) -> Tensor:
    """The top-``count`` classes of ``tensor`` per batch row, as a BYTES tensor."""
    values = tensor.to_numpy()
    rows = values.reshape(values.shape[0] if batched and values.ndim else 1, -1)
    k = min(count, rows.shape[1])
    elements: list[object] = []
    for row in rows:
        for index in _top_indices(row, k):
            elements.append(_format(row[index], int(index), labels))
    shape = (rows.shape[0], k) if batched and values.ndim else (k,)
    return Tensor(tensor.name, "BYTES", shape, encode_bytes_elements(elements))


def _top_indices(row: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first; ties keep the lower index first."""
    last = row.size - 1
    descending = last - np.argsort(row[::-1], kind="stable")[::-1]
    return descending[:k]


def _format(value: np.generic, index: int, labels: Sequence[str]) -> str:
    text = f"{float(value):f}" if value.dtype.kind == "f" else str(int(value))
    if index < len(labels) and labels[index]:
        return f"{text}:{index}:{labels[index]}"
    return f"{text}:{index}"
