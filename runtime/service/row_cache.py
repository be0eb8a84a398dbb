"""The row cache: a batched request whose whole-request entry missed is answered row by row.

Each row has its own key: the request's key restricted to that row (the same canonical
encoding, the row's inputs with batch size 1), so a row cached from one batch serves any later
batch holding it, and a one-row request is its own row. The rows held by a tier are taken from
it; a row another request is computing is waited for (single-flight per row, in the cache);
only the other missing rows run, as one request to the model's scheduler (where the dynamic
batcher may merge them with other requests' rows); their outputs are cached row by row, and the
answer is assembled in the request's order. The caller still caches the whole answer, so an
exact repeat stays one lookup.

Only for models that declare their rows independent (``cachefleet.row_cache``): the server
cannot know whether a model mixes rows (batch normalisation in training mode, attention across
the batch), and a row cache would then be wrong.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from cachefleet.runtime.cache.api import CacheRequest, CacheStatus, ResponseCache, RowHit
from cachefleet.runtime.cache.terms import on_terms
from cachefleet.runtime.service import rows
from cachefleet.runtime.tensor import Tensor

#: Runs a request on the model (through its scheduler).
Run = Callable[[Sequence[Tensor]], Awaitable[list[Tensor]]]


@dataclass(frozen=True, slots=True)
class RowAnswer:
    outputs: list[Tensor]
    #: A tier's hit (every row cached: the farthest tier any row came from), PARTIAL (some
    #: rows) or MISS (none).
    status: CacheStatus


async def answer_by_rows(
    cache: ResponseCache, request: CacheRequest, run: Run, terms: Hashable | None = None
) -> RowAnswer:
    """The outputs of a batched ``request``, each row from the cache when it holds it; its
    rows are shared only with requests on the same scheduling ``terms`` (``cache.terms``)."""
    row_inputs = rows.rows_of(request.inputs)
    # Each row is its own request: its key is computed from its own inputs.
    row_requests = [replace(request, inputs=inputs) for inputs in row_inputs]

    async def run_missing(missing: Sequence[int]) -> list[list[Tensor]]:
        if list(missing) == list(range(len(row_inputs))):
            outputs = await run(request.inputs)
        else:
            outputs = await run(rows.join([row_inputs[index] for index in missing]))
        return rows.split(outputs, [1] * len(missing)) if len(missing) > 1 else [outputs]

    answered = await cache.get_rows_or_compute(row_requests, on_terms(run_missing, terms))
    if not _agree([outputs for outputs, _ in answered]):
        # Rows cached with different output shapes (a model whose output dims vary): they
        # cannot be stacked, so the whole request runs.
        return RowAnswer(await run(request.inputs), CacheStatus.MISS)
    return RowAnswer(rows.join([outputs for outputs, _ in answered]), _status(answered))


def _status(answered: Sequence[RowHit]) -> CacheStatus:
    ran = sum(1 for _, status in answered if status is CacheStatus.MISS)
    if ran == len(answered):
        return CacheStatus.MISS
    if ran:
        return CacheStatus.PARTIAL
    # Every row a hit: the farthest of the tiers they came from (statuses are ranked in the
    # order a request meets the tiers), so a batch that needed Redis says so.
    return max((status for _, status in answered), key=lambda status: status.rank)


def _agree(outputs: Sequence[Sequence[Tensor]]) -> bool:
    first = rows.signature(outputs[0])
    return all(rows.signature(each) == first for each in outputs[1:])
