"""Where a model runs: on the event loop itself, or in the executor's threads.

Handing a run to a thread and back costs a wake-up, two GIL hand-offs and a future, about
50-150 microseconds on a loaded core: far more than a model like ``simple`` takes to run (a
few microseconds of ONNX Runtime). Such a model runs faster on the event loop, which it blocks
for less time than the hand-off would. Which models qualify is decided once, when a version is
loaded (off the event loop): a model whose every input has a fixed size (bounded by
``max_batch_size``) is timed on zeros at its largest shape, and runs inline when that stays
under the budget. Anything else (BYTES inputs, variable dimensions, a model file too large to
be quick, a slow or failing trial) runs in the executor.
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
#: A model file over this size is not timed: a run that reads even a fraction of its weights
#: outlasts the budget at memory bandwidth, and the trial would cost a whole first inference
#: at load (1.3 s for the DenseNet-121 sample on one CPU core).
UNTIMED_FILE_BYTES = 8 << 20


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


def runs_inline(model: Model, budget_s: float = INLINE_BUDGET_S, *, file_bytes: int = 0) -> bool:
    """Whether ``model`` is quick enough, at its largest request, to run on the event loop.

    Blocking (it runs the model up to six times): call it where the model is loaded, with
    the size of its model file, so that a large model is placed without a trial.
    """
    inputs = largest_inputs(model)
    if inputs is None:
        return False
    if file_bytes > UNTIMED_FILE_BYTES:
        log.info("model %s version %s: runs in threads (model file of %d MiB, not timed)",
                 model.name, model.version, file_bytes >> 20)  # fmt: skip
        return False
    timings = []
    # One untimed run first: a session's first run allocates and initialises what the next
    # ones reuse (on a loaded machine it took over 4 ms of `simple`'s 10 us), and judged by it
    # a quick model landed in threads at random, paying a hand-off per miss ever after.
    for trial in range(_TRIALS + 1):
        started = time.perf_counter()
        try:
            model.run(inputs)
        except Exception as error:  # a trial that fails says nothing: stay in the executor
            log.info("model %s: trial run failed (%s); it runs in threads", model.name, error)
            return False
        if trial == 0:
            continue
        timings.append(time.perf_counter() - started)
        if len(timings) >= 2 and min(timings) > 20 * budget_s:
            return False  # clearly slow, twice over: no need to run it again
    best = min(timings)  # other work on the machine only ever adds to a run's time
    quick = best <= budget_s
    log.info(
        "model %s version %s: %s (fastest trial %.0f us at its largest shape)",
        model.name, model.version, "runs on the event loop" if quick else "runs in threads",
        1e6 * best,
    )  # fmt: skip
    return quick
