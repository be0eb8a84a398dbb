"""The batching run's pieces that need no server: the model variants and the request bodies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cachefleet.bench.batching.traffic import POOL_SIZE, ModelInputs, Traffic, split_body
from cachefleet.bench.batching.variants import write_variants
from cachefleet.runtime.models.config import parse_config, to_model_config
from cachefleet.runtime.models.scheduling import scheduling_policy
from cachefleet.runtime.samples.arithmetic import arithmetic_config
from cachefleet.runtime.samples.densenet import DENSENET_BATCH_CONFIG

SIMPLE = ModelInputs(("INPUT0", "INPUT1"), ("INT32", "INT32"), ((16,), (16,)))


def test_variants_differ_from_their_sample_in_one_block(tmp_path: Path) -> None:
    for name, config in (("simple", arithmetic_config("simple", "TYPE_INT32")),
                         ("densenet_batch", DENSENET_BATCH_CONFIG)):  # fmt: skip
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.onnx").write_bytes(b"onnx")
        (tmp_path / name / "config.pbtxt").write_text(config)
    made = write_variants(tmp_path)
    policies = {}
    for name in made:
        text = (tmp_path / name / "config.pbtxt").read_text()
        policies[name] = scheduling_policy(to_model_config(parse_config(text, source=name)))
        assert (tmp_path / name / "1" / "model.onnx").read_bytes() == b"onnx"
    batching = {name: policy.batching is not None for name, policy in policies.items()}
    rows = {name: policy.row_cache for name, policy in policies.items()}
    assert batching == {
        "densenet_unbatched": False, "densenet_whole": True, "simple_batched": True,
        "simple_rows": True, "simple_whole": True,
    }  # fmt: skip
    assert [name for name, on in rows.items() if on] == ["simple_rows"]


def rows_of(body: bytes) -> list[bytes]:
    length, payload = split_body(body)
    header = json.loads(payload[:length])
    first = header["inputs"][0]
    data = payload[length : length + first["parameters"]["binary_data_size"]]
    count = first["shape"][0]
    width = len(data) // count
    return [data[i * width : (i + 1) * width] for i in range(count)]


def test_the_asked_share_of_rows_repeats_and_the_others_never_do() -> None:
    pool = {row for body in Traffic(SIMPLE, 8, 0.5, 1, 0).pool_bodies() for row in rows_of(body)}
    assert len(pool) == POOL_SIZE
    for share in (0.0, 0.5, 0.9):
        seen: list[bytes] = []
        for sender in (1, 2):
            traffic = Traffic(SIMPLE, 8, share, nonce=7, sender=sender)
            for _ in range(50):
                seen += rows_of(traffic.next_body())
        repeated = [row for row in seen if row in pool]
        unique = [row for row in seen if row not in pool]
        assert len(repeated) == round(share * len(seen))
        assert len(set(unique)) == len(unique), "rows outside the pool never repeat"


def test_rows_are_valid_numbers_for_both_sample_datatypes() -> None:
    densenet = ModelInputs(("data_0",), ("FP32",), ((3, 224, 224),))
    body = Traffic(densenet, 2, 0.0, nonce=3, sender=1).next_body()
    floats = np.frombuffer(rows_of(body)[0], dtype="<f4")
    assert np.isfinite(floats).all()
