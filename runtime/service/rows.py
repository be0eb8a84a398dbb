"""Tensors cut and joined along the batch dimension (dim 0), without numpy.

A :class:`~cachefleet.runtime.tensor.Tensor` holds C-order little-endian bytes, and a BYTES
tensor its elements as length-prefixed strings in order, so rows are contiguous: joining
requests along dim 0 is joining their bytes, and cutting a batch into rows is slicing them.
"""

from __future__ import annotations

from collections.abc import Sequence

from cachefleet.runtime.errors import ModelExecutionError
from cachefleet.runtime.tensor import NUMPY_DTYPES, Tensor, element_count

#: What must agree for requests to share one execution: each input's name, datatype and
#: non-batch dims, in name order.
Signature = tuple[tuple[str, str, tuple[int, ...]], ...]


def signature(inputs: Sequence[Tensor]) -> Signature:
    return tuple(sorted((t.name, t.datatype, t.shape[1:]) for t in inputs))


def batch_rows(inputs: Sequence[Tensor]) -> int:
    """The batch size of a request (inputs were checked to agree on it)."""
    return inputs[0].shape[0] if inputs else 0


def join(parts: Sequence[Sequence[Tensor]]) -> list[Tensor]:
    """Requests with one signature joined into one, in order, along dim 0; the tensors keep
    the first part's order (outputs stay in the model configuration's order)."""
    if len(parts) == 1:
        return list(parts[0])
    joined: list[Tensor] = []
    for first in parts[0]:
        same = [_named(part, first.name) for part in parts]
        rows = sum(tensor.shape[0] for tensor in same)
        data = b"".join(tensor.data for tensor in same)
        joined.append(Tensor(first.name, first.datatype, (rows, *first.shape[1:]), data))
    return joined


def split(outputs: Sequence[Tensor], sizes: Sequence[int]) -> list[list[Tensor]]:
    """A batch's outputs cut back into consecutive pieces of ``sizes`` rows each."""
    if len(sizes) == 1:
        return [list(outputs)]
    pieces: list[list[Tensor]] = [[] for _ in sizes]
    total = sum(sizes)
    for tensor in outputs:
        if not tensor.shape or tensor.shape[0] != total:
            raise ModelExecutionError(
                f"output {tensor.name!r} has shape {list(tensor.shape)}, not {total} rows: "
                "the model does not keep the batch dimension first, so it cannot be batched"
            )
        offsets = _row_offsets(tensor)
        start = 0
        for index, size in enumerate(sizes):
            end = start + size
            data = tensor.data[offsets[start] : offsets[end]]
            pieces[index].append(
                Tensor(tensor.name, tensor.datatype, (size, *tensor.shape[1:]), data)
            )
            start = end
    return pieces


def rows_of(tensors: Sequence[Tensor]) -> list[list[Tensor]]:
    """Each row of a request (or of a response) as its own one-row tensors."""
    count = tensors[0].shape[0] if tensors else 0
    return split(tensors, [1] * count) if count > 1 else [list(tensors)]


def _row_offsets(tensor: Tensor) -> list[int]:
    """Byte offset of the start of every row, plus the end."""
    rows = tensor.shape[0]
    per_row = element_count(tensor.shape[1:])
    if tensor.datatype != "BYTES":
        width = per_row * NUMPY_DTYPES[tensor.datatype].itemsize
        return [row * width for row in range(rows + 1)]
    offsets, offset, view = [0], 0, memoryview(tensor.data)
    for _ in range(rows):
        for _ in range(per_row):
            offset += 4 + int.from_bytes(view[offset : offset + 4], "little")
        offsets.append(offset)
    return offsets


def _named(tensors: Sequence[Tensor], name: str) -> Tensor:
    return next(tensor for tensor in tensors if tensor.name == name)
