"""Joining requests along the batch dimension and cutting answers back, BYTES included."""

from __future__ import annotations

import numpy as np
import pytest

from cachefleet.runtime.errors import ModelExecutionError
from cachefleet.runtime.service import rows
from cachefleet.runtime.tensor import Tensor


def strings(*values: str, width: int = 2) -> Tensor:
    array = np.array([v.encode() for v in values], dtype=object).reshape(-1, width)
    return Tensor.from_numpy("S", array)


def test_join_then_split_gives_back_each_request() -> None:
    first = [
        Tensor.from_numpy("A", np.arange(6, dtype=np.float32).reshape(3, 2)),
        strings("a", "bb", "ccc", "", "e", "ff"),
    ]
    second = [strings("x", "yy"), Tensor.from_numpy("A", np.full((1, 2), 9, dtype=np.float32))]
    joined = rows.join([first, second])
    assert [t.name for t in joined] == ["A", "S"]
    assert [t.shape for t in joined] == [(4, 2), (4, 2)]
    pieces = rows.split(joined, [3, 1])
    by_name = [{t.name: t for t in piece} for piece in pieces]
    assert by_name[0] == {t.name: t for t in first}
    assert by_name[1] == {t.name: t for t in second}


def test_rows_of_cuts_a_request_into_one_row_tensors() -> None:
    tensor = strings("a", "bb", "ccc", "dddd", width=1)
    cut = rows.rows_of([tensor])
    assert [piece[0].to_numpy().tolist() for piece in cut] == [
        [[b"a"]],
        [[b"bb"]],
        [[b"ccc"]],
        [[b"dddd"]],
    ]
    assert rows.join(cut) == [tensor]


def test_signature_tells_apart_what_cannot_share_an_execution() -> None:
    one = [Tensor.from_numpy("A", np.zeros((1, 4), dtype=np.float32))]
    two = [Tensor.from_numpy("A", np.zeros((3, 4), dtype=np.float32))]
    wider = [Tensor.from_numpy("A", np.zeros((1, 5), dtype=np.float32))]
    other_type = [Tensor.from_numpy("A", np.zeros((1, 4), dtype=np.int32))]
    assert rows.signature(one) == rows.signature(two)
    assert rows.signature(one) != rows.signature(wider)
    assert rows.signature(one) != rows.signature(other_type)


def test_an_output_without_the_batch_dimension_cannot_be_split() -> None:
    output = Tensor.from_numpy("Y", np.zeros((5,), dtype=np.float32))
    with pytest.raises(ModelExecutionError, match="batch dimension"):
        rows.split([output], [2, 2])
