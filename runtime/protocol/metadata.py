"""Server, model and repository metadata documents, shaped as Triton returns them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cachefleet.runtime.models.types import Model, ModelIndexEntry, TensorSpec

#: The name in ``GET /v2``: Triton's, because Triton's own clients check it (its health and
#: metadata example exits unless the server is called "triton"); ``version`` is cachefleet's.
SERVER_NAME = "triton"
#: Protocol extensions this server implements (Triton reports these in GET /v2).
EXTENSIONS = (
    "binary_tensor_data",
    "classification",
    "model_repository",
    "response_cache",
    "statistics",
    "system_shared_memory",
)


def server_metadata(version: str) -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": version, "extensions": list(EXTENSIONS)}


def model_metadata(model: Model, versions: Sequence[str]) -> dict[str, Any]:
    """``GET /v2/models/{m}``: inputs and outputs with the full request shape (batch as -1)."""
    config = model.config
    return {
        "name": model.name,
        "versions": list(versions),
        "platform": config.platform,
        "inputs": [_tensor(spec, config.max_batch_size) for spec in config.inputs],
        "outputs": [_tensor(spec, config.max_batch_size) for spec in config.outputs],
    }


def repository_index(entries: Sequence[ModelIndexEntry], *, ready_only: bool) -> list[Any]:
    """``POST /v2/repository/index``: one row per model version."""
    rows: list[dict[str, str]] = []
    for entry in entries:
        if ready_only and entry.state != "READY":
            continue
        row = {"name": entry.name, "version": entry.version, "state": entry.state}
        if entry.reason:
            row["reason"] = entry.reason
        rows.append(row)
    return rows


def _tensor(spec: TensorSpec, max_batch_size: int) -> dict[str, Any]:
    return {
        "name": spec.name,
        "datatype": spec.datatype,
        "shape": list(spec.shape(max_batch_size)),
    }
