"""Where a model runs: on the event loop itself, or in the executor's threads.

Handing a run to a thread and back costs a wake-up, two GIL hand-offs and a future, about
50-150 microseconds on a loaded core: far more than a model like ``simple`` takes to run (a
few microseconds of ONNX Runtime). Such a model runs faster on the event loop, which it blocks
for less time than the hand-off would. Which models qualify is decided once, when the server
starts: a model whose every input has a fixed size (bounded by ``max_batch_size``) is run on
zeros at its largest shape, and runs inline when the CPU time of that run (this thread's, so
that other work on a busy machine does not count) stays under the budget. Anything else
(BYTES inputs, variable dimensions, a slow or failing trial) runs in the executor, as before.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from cachefleet.runtime.models.types import Model
from cachefleet.runtime.tensor import NUMPY_DTYPES, Tensor

log = logging.getLogger(__name__)

#: A run that may block the event loop: well under one thread hand-off.
INLINE_BUDGET_S = 0.0002
_TRIALS = 5


def largest_inputs(model: Model) -> list[Tensor] | None:
    """Zeros for every input at the largest shape a request may send; None when unbounded."""
    config = model.config
    batch = (config.max_batch_size,) if config.max_batch_size > 0 else ()
    tensors = []
    for spec in config.inputs:
        dtype = NUMPY_DTYPES.get(spec.datatype)
        if dtype is None or any(dim < 0 for dim in spec.dims):
            return None
        tensors.append(Tensor.from_numpy(spec.name, np.zeros((*batch, *spec.dims), dtype=dtype)))
    return tensors


def runs_inline(model: Model, budget_s: float = INLINE_BUDGET_S) -> bool:
    """Whether ``model`` is quick enough, at its largest request, to run on the event loop."""
    quick, why = _trial(model, budget_s)
    where = "runs on the event loop" if quick else "runs in threads"
    log.info("model %s version %s: %s (%s)", model.name, model.version, where, why)
    return quick


def _trial(model: Model, budget_s: float) -> tuple[bool, str]:
    inputs = largest_inputs(model)
    if inputs is None:
        return False, "BYTES or variable-size inputs"
    timings = []
    for _ in range(_TRIALS):
        started = time.thread_time()
        try:
            model.run(inputs)
        except Exception as error:  # a trial that fails says nothing: stay in the executor
            return False, f"trial run failed: {error}"
        timings.append(time.thread_time() - started)
        if timings[-1] > 20 * budget_s:
            break  # clearly slow: no need to run it again
    median = sorted(timings)[len(timings) // 2]
    return median <= budget_s, f"median trial {1e6 * median:.0f} us of CPU at its largest shape"
