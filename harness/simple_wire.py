"""``simple``'s inference request as tritonclient encodes it (the binary extension): the one
encoding the in-process harnesses send, so that each times the same bytes."""

from __future__ import annotations

import numpy as np
import orjson

#: The JSON head: both inputs as 64 binary bytes, both outputs asked for in binary.
HEAD = orjson.dumps(
    {
        "inputs": [
            {"name": name, "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}}
            for name in ("INPUT0", "INPUT1")
        ],
        "outputs": [
            {"name": name, "parameters": {"binary_data": True}} for name in ("OUTPUT0", "OUTPUT1")
        ],
    }
)  # fmt: skip
_ONES = np.ones(16, dtype=np.int32).tobytes()


def simple_body(seed: int) -> bytes:
    """The body with INPUT0 filled with ``seed`` and INPUT1 with ones (``len(HEAD)`` is its
    ``Inference-Header-Content-Length``)."""
    return HEAD + np.full(16, seed, dtype=np.int32).tobytes() + _ONES
