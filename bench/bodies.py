"""Inference request bodies for the load generators: a warm set for hits, a template for misses.

Hits must reuse a small set of inputs the server has already cached; misses must never repeat,
not within a run, not across load-generator threads and not across runs against the same Redis.
So every miss body is the template with three 32-bit numbers written into the first input's
data: a per-run nonce, the sender's id and the sender's own counter. Each number lies in
[1e9, 0x7F800000): ten decimal digits in JSON, a positive INT32, and, read as FP32 bits, a
finite float (0x7F800000 is +inf), so the bytes stay valid for every model. The same template
serves the wrk Lua script and the Python senders.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import orjson

from cachefleet.bench.errors import BenchError

Encoding = Literal["binary", "json"]
SlotFormat = Literal["i32le", "dec"]

#: The smallest value a miss slot holds; see the module docstring.
SLOT_BASE = 1_000_000_000
#: FP32 +inf; everything below it (and at or above SLOT_BASE) is a finite positive float.
SLOT_LIMIT = 0x7F800000
_SLOTS = 3
_SENTINEL = 1_111_111_111
_DTYPES = {"INT32": np.dtype("<i4"), "FP32": np.dtype("<f4")}


@dataclass(frozen=True)
class InputSpec:
    """One model input as the server's metadata describes it, with -1 dimensions set to 1."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class RequestSet:
    """Everything a sender needs to post hits and unique misses to one model."""

    model: str
    encoding: Encoding
    path: str
    headers: Mapping[str, str]
    hit_bodies: tuple[bytes, ...]
    miss_prefix: bytes
    miss_suffix: bytes
    slot_format: SlotFormat

    def miss_body(self, nonce: int, sender: int, counter: int) -> bytes:
        """The unique body for ``counter`` of ``sender`` in the run identified by ``nonce``."""
        values = (nonce, SLOT_BASE + sender, SLOT_BASE + counter)
        if self.slot_format == "i32le":
            slots = struct.pack("<3i", *values)
        else:
            slots = b",".join(str(value).encode() for value in values)
        return self.miss_prefix + slots + self.miss_suffix


def new_nonce() -> int:
    """A random run identifier, a valid slot value, so that misses differ between runs."""
    return random.randrange(SLOT_BASE, SLOT_LIMIT)


def inputs_from_metadata(metadata: Mapping[str, Any]) -> list[InputSpec]:
    """The inputs of ``GET /v2/models/{m}`` with variable dimensions (-1) set to 1."""
    specs = []
    for entry in metadata.get("inputs", []):
        datatype = str(entry["datatype"])
        if datatype not in _DTYPES:
            raise BenchError(f"the harness only sends INT32 and FP32 inputs, not {datatype}")
        shape = tuple(1 if int(dim) < 0 else int(dim) for dim in entry["shape"])
        specs.append(InputSpec(str(entry["name"]), datatype, shape))
    if not specs or specs[0].elements < _SLOTS:
        raise BenchError(f"model {metadata.get('name')!r}: the first input is too small to vary")
    return specs


def build_request_set(
    model: str,
    inputs: Sequence[InputSpec],
    outputs: Sequence[str],
    encoding: Encoding,
    *,
    warm_count: int = 16,
    seed: int = 0,
) -> RequestSet:
    """Bodies for ``model``: ``warm_count`` fixed hit inputs and the miss template."""
    rng = np.random.default_rng(seed)
    builder = _binary_body if encoding == "binary" else _json_body
    hit_bodies = tuple(
        builder(inputs, outputs, _random_inputs(inputs, rng, index))[0]
        for index in range(warm_count)
    )
    template, headers = builder(inputs, outputs, _random_inputs(inputs, rng, warm_count), True)
    if encoding == "binary":
        start = int(headers["Inference-Header-Content-Length"])
        prefix, suffix = template[:start], template[start + 4 * _SLOTS :]
    else:
        marker = b",".join([str(_SENTINEL).encode()] * _SLOTS)
        prefix, _, suffix = template.partition(marker)
    return RequestSet(
        model=model,
        encoding=encoding,
        path=f"/v2/models/{model}/infer",
        headers=headers,
        hit_bodies=hit_bodies,
        miss_prefix=prefix,
        miss_suffix=suffix,
        slot_format="i32le" if encoding == "binary" else "dec",
    )


def _random_inputs(
    inputs: Sequence[InputSpec], rng: np.random.Generator, index: int
) -> list[np.ndarray]:
    """Random data per input; the first element carries ``index`` so warm inputs differ."""
    arrays: list[np.ndarray] = []
    for spec in inputs:
        array: np.ndarray
        if spec.datatype == "INT32":
            array = rng.integers(0, 1000, size=spec.shape, dtype=np.int32)
        else:
            array = rng.random(size=spec.shape, dtype=np.float32)
        array.reshape(-1)[0] = index
        arrays.append(array)
    return arrays


def _binary_body(
    inputs: Sequence[InputSpec],
    outputs: Sequence[str],
    arrays: Sequence[np.ndarray],
    template: bool = False,
) -> tuple[bytes, dict[str, str]]:
    """Triton's binary tensor extension: the JSON header, then each input's raw bytes."""
    header = {
        "inputs": [
            {
                "name": spec.name,
                "datatype": spec.datatype,
                "shape": list(spec.shape),
                "parameters": {"binary_data_size": spec.elements * 4},
            }
            for spec in inputs
        ],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
    }
    head = orjson.dumps(header)
    data = b"".join(
        array.astype(_DTYPES[spec.datatype]).tobytes()
        for spec, array in zip(inputs, arrays, strict=True)
    )
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return head + data, headers


def _json_body(
    inputs: Sequence[InputSpec],
    outputs: Sequence[str],
    arrays: Sequence[np.ndarray],
    template: bool = False,
) -> tuple[bytes, dict[str, str]]:
    """Plain KServe v2 JSON; a template's first three elements are the sentinel slots."""
    entries = []
    for position, (spec, array) in enumerate(zip(inputs, arrays, strict=True)):
        data: list[Any] = array.reshape(-1).tolist()
        if template and position == 0:
            data[:_SLOTS] = [_SENTINEL] * _SLOTS
        entries.append(
            {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape), "data": data}
        )
    document = {"inputs": entries, "outputs": [{"name": name} for name in outputs]}
    return orjson.dumps(document), {"Content-Type": "application/json"}
