"""Request bodies of the batching run: ``rows`` rows per request, a share of them repeated.

A repeated row is one of a small pool that the run sends once before it measures (so the row
cache holds it); every other row is unique: the base row with three numbers written into its
first elements (the run's nonce, the sender and the row's own index), as the main harness makes
its misses (see :mod:`cachefleet.bench.bodies`: the numbers are valid INT32 and finite FP32).
Which rows repeat is spread evenly and exactly over each sender's rows, so every scenario gets
the share it asks for.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import orjson

from cachefleet.bench.bodies import SLOT_BASE
from cachefleet.bench.load import is_miss

#: How many distinct rows repeat.
POOL_SIZE = 32
_POOL_SENDER = 999_999


@dataclass(frozen=True)
class ModelInputs:
    """A model's inputs by name: datatype and the shape of one row (batch dimension excluded)."""

    names: tuple[str, ...]
    datatypes: tuple[str, ...]
    row_shapes: tuple[tuple[int, ...], ...]


_DTYPES = {"FP32": np.dtype("<f4"), "INT32": np.dtype("<i4")}


@dataclass
class Traffic:
    """Builds the bodies of one sender."""

    inputs: ModelInputs
    rows: int
    repeat_share: float
    nonce: int
    sender: int
    seed: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng(7)
        self._base = [
            _random(rng, datatype, shape)
            for datatype, shape in zip(self.inputs.datatypes, self.inputs.row_shapes, strict=True)
        ]
        self._pick = random.Random(self.seed * 1000 + self.sender)
        self._count = 0

    def pool_bodies(self) -> list[bytes]:
        """The repeated rows, ``rows`` per body, to send once before measuring."""
        pool = [
            self._row(SLOT_BASE + 1, SLOT_BASE + _POOL_SENDER, index) for index in range(POOL_SIZE)
        ]
        return [
            self._body(pool[start : start + self.rows]) for start in range(0, POOL_SIZE, self.rows)
        ]

    def next_body(self) -> bytes:
        rows = []
        for _ in range(self.rows):
            self._count += 1
            if not is_miss(self._count, round(self.repeat_share * 10_000)):
                rows.append(self._unique(self._count))
            else:
                pool_index = self._pick.randrange(POOL_SIZE)
                rows.append(self._row(SLOT_BASE + 1, SLOT_BASE + _POOL_SENDER, pool_index))
        return self._body(rows)

    def _unique(self, index: int) -> list[np.ndarray]:
        return self._row(SLOT_BASE + 2 + self.nonce % 100_000_000, SLOT_BASE + self.sender, index)

    def _row(self, first: int, second: int, third: int) -> list[np.ndarray]:
        row = [array.copy() for array in self._base]
        row[0].reshape(-1).view("<i4")[:3] = (first, second, SLOT_BASE + third)
        return row

    def _body(self, rows: list[list[np.ndarray]]) -> bytes:
        """Triton's binary tensor extension: a JSON header, then each input's raw bytes."""
        tensors = [
            np.stack([row[index] for row in rows]) for index in range(len(self.inputs.names))
        ]
        header = orjson.dumps(
            {
                "inputs": [
                    {"name": name, "datatype": datatype, "shape": list(array.shape),
                     "parameters": {"binary_data_size": array.nbytes}}
                    for name, datatype, array in zip(
                        self.inputs.names, self.inputs.datatypes, tensors, strict=True
                    )
                ],
                "parameters": {"binary_data_output": True},
            }
        )  # fmt: skip
        return len(header).to_bytes(8, "little") + header + b"".join(a.tobytes() for a in tensors)


def split_body(body: bytes) -> tuple[int, bytes]:
    """(JSON header length, request bytes) of a body made by :meth:`Traffic._body`."""
    return int.from_bytes(body[:8], "little"), body[8:]


def _random(rng: np.random.Generator, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype == "FP32":
        return rng.standard_normal(shape, dtype=np.float32)
    return rng.integers(-1000, 1000, shape, dtype=np.int32).astype(_DTYPES[datatype])
