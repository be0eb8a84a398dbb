"""The benchmark's peer: one ONNX file served by KServe's Python model server (a custom model).

Runs in the peer's own venv (``scripts/setup-bench-peer``), never in ours, so it imports nothing
from cachefleet: ``python -I kserve_peer_model.py --model-file F --name N --port P``. It is the
straightforward KServe custom model, an ONNX Runtime session in ``load`` and ``session.run`` in
``predict``, with model metadata filled from the session so that clients can shape requests.
Per-request access and latency logs are off unless ``--verbose``: ours logs none either.
"""

from __future__ import annotations

import argparse
from typing import Any

_DATATYPES = {
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


def _tensor_metadata(node: Any) -> dict[str, Any]:
    shape = [dim if isinstance(dim, int) else -1 for dim in node.shape]
    return {"name": node.name, "datatype": _DATATYPES.get(node.type, node.type), "shape": shape}


def build_model(name: str, model_file: str) -> Any:
    import kserve
    import onnxruntime
    from kserve import InferOutput, InferRequest, InferResponse
    from kserve.utils.numpy_codec import from_np_dtype

    class OnnxModel(kserve.Model):  # type: ignore[misc]
        """An ONNX Runtime session behind KServe's v2 data plane."""

        def __init__(self) -> None:
            super().__init__(name)
            self.session: Any = None

        def load(self) -> bool:
            self.session = onnxruntime.InferenceSession(
                model_file, providers=["CPUExecutionProvider"]
            )
            self.ready = True
            return True

        async def get_input_types(self) -> list[dict[str, Any]]:
            return [_tensor_metadata(node) for node in self.session.get_inputs()]

        async def get_output_types(self) -> list[dict[str, Any]]:
            return [_tensor_metadata(node) for node in self.session.get_outputs()]

        async def predict(
            self, payload: InferRequest, headers: Any = None, response_headers: Any = None
        ) -> InferResponse:
            feeds = {tensor.name: tensor.as_numpy() for tensor in payload.inputs}
            names = [node.name for node in self.session.get_outputs()]
            results = self.session.run(names, feeds)
            outputs = []
            for output_name, array in zip(names, results, strict=True):
                output = InferOutput(
                    name=output_name, shape=list(array.shape), datatype=from_np_dtype(array.dtype)
                )
                output.set_data_from_numpy(array, binary_data=False)
                outputs.append(output)
            return InferResponse(
                response_id=payload.id or "", model_name=name, infer_outputs=outputs
            )

    return OnnxModel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-file", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--verbose", action="store_true", help="keep KServe's per-request access and latency logs"
    )
    args = parser.parse_args()

    import logging

    import kserve

    model = build_model(args.name, args.model_file)
    model.load()
    server = kserve.ModelServer(
        http_port=args.port, workers=1, enable_grpc=False, enable_latency_logging=args.verbose
    )
    if not args.verbose:
        # Ours logs nothing per request either: a like-for-like comparison.
        logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    server.start([model])


if __name__ == "__main__":
    main()
