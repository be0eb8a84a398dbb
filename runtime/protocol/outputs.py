"""Which tensors a response carries: the requested outputs, classified where asked.

Shared by every transport's renderer (HTTP JSON/binary, gRPC), so that output selection and the
classification extension behave the same whichever way a client asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cachefleet.runtime.errors import ModelExecutionError
from cachefleet.runtime.protocol.classification import classify
from cachefleet.runtime.protocol.request import InferRequest, RequestedOutput
from cachefleet.runtime.tensor import Tensor


def select_outputs(
    request: InferRequest,
    outputs: Sequence[Tensor],
    *,
    model_name: str,
    labels: Mapping[str, Sequence[str]],
    batched: bool,
) -> list[tuple[RequestedOutput, Tensor]]:
    """The tensors to send, in request order (every output when none was named)."""
    by_name = {tensor.name: tensor for tensor in outputs}
    wanted = request.outputs or tuple(RequestedOutput(tensor.name) for tensor in outputs)
    selected: list[tuple[RequestedOutput, Tensor]] = []
    for output in wanted:
        tensor = by_name.get(output.name)
        if tensor is None:
            raise ModelExecutionError(
                f"model {model_name!r} did not produce output {output.name!r}"
            )
        if output.classification:
            tensor = classify(
                tensor, output.classification, labels.get(output.name, ()), batched=batched
            )
        selected.append((output, tensor))
    return selected
