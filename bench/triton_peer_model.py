"""The benchmark's Triton peer: real ``tritonserver`` with its local response cache, via PyTriton.

Runs in the peer's own venv (``scripts/setup-bench-peer`` makes it with Debian's
``/usr/bin/python3.11``, because the Python backend stub links the system libpython), never in
ours, so it imports nothing from cachefleet::

    python -I triton_peer_model.py --repository DIR --models simple densenet_onnx --http-port P

Each model is bound with ``response_cache`` on, under the name, inputs and outputs of our
sample repository, and runs the same ONNX file through an ONNX Runtime session inside its
Python function (PyTriton's model is a Python callable: Triton's ONNX Runtime backend is not
in the wheel). A cache hit never reaches that function: Triton answers it in C++ from its
local cache, which is what the benchmark compares. Misses go through the Python backend and
PyTriton's inter-process hop, so they say little about Triton's own miss path.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

#: config.pbtxt data types of the sample models -> numpy dtype names.
_DTYPES = {"TYPE_INT32": "int32", "TYPE_INT8": "int8", "TYPE_FP32": "float32"}
#: ONNX Runtime's type names of the sample models' outputs -> numpy dtype names.
_ONNX_DTYPES = {"tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(float)": "float32"}
_TENSOR = re.compile(
    r'\{\s*name:\s*"(?P<name>[^"]+)"\s*data_type:\s*(?P<type>\w+)[^}]*?dims:\s*\[(?P<dims>[^\]]*)\]'
)


def read_config(folder: Path) -> tuple[int, list[tuple[str, str, tuple[int, ...]]], list[str]]:
    """``max_batch_size``, inputs (name, dtype, dims) and output names of a sample's config."""
    text = (folder / "config.pbtxt").read_text()
    batch = re.search(r"max_batch_size:\s*(\d+)", text)
    inputs_text, _, outputs_text = text.partition("output [")
    inputs = [
        (m["name"], _DTYPES[m["type"]], tuple(int(d) for d in m["dims"].split(",")))
        for m in _TENSOR.finditer(inputs_text)
    ]
    outputs = [m["name"] for m in _TENSOR.finditer(outputs_text)]
    return (int(batch.group(1)) if batch else 0), inputs, outputs


def bind(triton: Any, folder: Path, intra_op_threads: int, response_cache: bool = True) -> None:
    """Bind one sample model, served by an ONNX Runtime session, with the response cache on
    (off with ``response_cache=False``: Triton without a cache, a miss-path baseline)."""
    import numpy as np
    import onnxruntime
    from pytriton.model_config import ModelConfig, Tensor

    max_batch_size, inputs, outputs = read_config(folder)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    session = onnxruntime.InferenceSession(
        str(folder / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    output_nodes = {node.name: node for node in session.get_outputs()}

    def infer(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        answers = []
        for request in requests:
            results = session.run(outputs, {name: request[name] for name, _, _ in inputs})
            answers.append(dict(zip(outputs, results, strict=True)))
        return answers

    def out_dims(name: str) -> tuple[int, ...]:
        dims = [d if isinstance(d, int) else -1 for d in output_nodes[name].shape]
        return tuple(dims[1:] if max_batch_size > 0 else dims)

    triton.bind(
        model_name=folder.name,
        infer_func=infer,
        inputs=[Tensor(name=n, dtype=np.dtype(t).type, shape=d) for n, t, d in inputs],
        outputs=[
            Tensor(
                name=n, dtype=np.dtype(_ONNX_DTYPES[output_nodes[n].type]).type, shape=out_dims(n)
            )
            for n in outputs
        ],
        config=ModelConfig(
            batching=max_batch_size > 0,
            max_batch_size=max(max_batch_size, 1),
            response_cache=response_cache,
        ),
        strict=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--cache-bytes", type=int, default=256 * 2**20)
    # No response cache at all (the server's and every model's): Triton alone as a baseline.
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--intra-op-threads", type=int, default=1)
    # The token of PyTriton's restricted endpoints (read from this file), for a client that
    # needs them (cachefleet in front of the peer reads its repository index); else a random one.
    parser.add_argument("--access-token-file", type=Path)
    args = parser.parse_args()

    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        metrics_address="127.0.0.1",
        metrics_port=args.metrics_port,
        cache_config=None if args.no_cache else [f"local,size={args.cache_bytes}"],
        log_verbose=0,
    )
    # PyTriton puts some endpoints behind a token of its own; perf_analyzer reads the statistics
    # (before and after each window) without one, so they stay open, as in a plain tritonserver.
    token = args.access_token_file.read_text().strip() if args.access_token_file else None
    security = TritonSecurityConfig(
        access_token=token,
        restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"],
    )
    with Triton(config=config, security_config=security) as triton:
        for model in args.models:
            bind(triton, args.repository / model, args.intra_op_threads, not args.no_cache)
        triton.serve()


if __name__ == "__main__":
    main()
