"""Which sample models run on the event loop: trial runs on the real models at load."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.models.placement import UNTIMED_FILE_BYTES, largest_inputs, runs_inline
from cachefleet.runtime.models.repository import load_repository

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples


def test_quick_fixed_size_models_run_inline_and_the_rest_in_threads(
    model_repository: Path,
) -> None:
    repository = load_repository(model_repository, ModelSettings(intra_op_threads=1))
    try:
        simple = repository.get("simple")
        inputs = largest_inputs(simple)
        assert inputs is not None
        assert [t.shape for t in inputs] == [(8, 16), (8, 16)]  # max_batch_size rows
        # A generous budget: what is decided is which kind of model qualifies, not timing.
        assert runs_inline(simple, budget_s=0.05)
        assert not runs_inline(repository.get("densenet_onnx"), budget_s=0.0001)
        assert largest_inputs(repository.get("simple_string")) is None  # BYTES: threads
        assert not runs_inline(repository.get("simple_string"), budget_s=1.0)
        assert not repository.get("densenet_onnx").quick, "decided at load"
        # A model file too large to be quick is placed in threads without a trial run, whatever
        # the budget: the trial would cost a whole first inference at load.
        assert not runs_inline(simple, budget_s=10.0, file_bytes=UNTIMED_FILE_BYTES + 1)
    finally:
        repository.close()


class _ColdFirstRun:
    """The real ``simple`` model whose first run is slow, as a session's first run is on a
    loaded machine (it allocates what later runs reuse)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.config, self.name, self.version = model.config, model.name, model.version
        self.runs = 0

    def run(self, inputs: Any) -> Any:
        self.runs += 1
        if self.runs == 1:
            time.sleep(0.15)  # over 20 budgets: the old trial gave up on this run alone
        return self._model.run(inputs)


def test_a_slow_first_run_does_not_place_a_quick_model_in_threads(
    model_repository: Path,
) -> None:
    repository = load_repository(model_repository, ModelSettings(intra_op_threads=1))
    try:
        cold = _ColdFirstRun(repository.get("simple"))
        # The budget is generous for a warm run and far under the cold one.
        assert runs_inline(cold, budget_s=0.005)  # type: ignore[arg-type]
        assert cold.runs == 6  # the untimed first run, then every trial
    finally:
        repository.close()
