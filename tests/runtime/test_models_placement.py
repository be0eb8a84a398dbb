"""Which sample models run on the event loop: trial runs on the real models at load."""

from __future__ import annotations

from pathlib import Path

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
