"""The Triton peer's side that runs without Triton: reading the sample configs it serves, and
Triton's cache counters read as the harness's measured hit ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachefleet.bench import server_metrics
from cachefleet.bench.triton_peer_model import read_config

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples


def test_the_peer_serves_the_samples_under_their_names_and_shapes(model_repository: Path) -> None:
    assert read_config(model_repository / "simple") == (
        8, [("INPUT0", "int32", (16,)), ("INPUT1", "int32", (16,))], ["OUTPUT0", "OUTPUT1"],
    )  # fmt: skip
    assert read_config(model_repository / "densenet_onnx") == (
        0, [("data_0", "float32", (3, 224, 224))], ["fc6_1"],
    )  # fmt: skip


def test_tritons_own_cache_counters_give_the_measured_hit_ratio(tmp_path: Path) -> None:
    text = (
        "# HELP nv_cache_num_hits_per_model Number of cache hits per model\n"
        "# TYPE nv_cache_num_hits_per_model counter\n"
        'nv_cache_num_hits_per_model{model="simple",version="1"} 90\n'
        'nv_cache_num_hits_per_model{model="densenet_onnx",version="1"} 5\n'
        "# HELP nv_cache_num_misses_per_model Number of cache misses per model\n"
        "# TYPE nv_cache_num_misses_per_model counter\n"
        'nv_cache_num_misses_per_model{model="simple",version="1"} 10\n'
    )
    page = tmp_path / "metrics"
    page.write_text(text)
    counters = server_metrics.read(page.as_uri(), "simple")
    assert counters.hits_by_tier == {"triton": 90.0}
    assert counters.hit_ratio == 0.9
    assert server_metrics.read((tmp_path / "absent").as_uri(), "simple").hit_ratio is None
