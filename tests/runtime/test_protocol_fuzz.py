"""Property: whatever the body, decoding either raises BadRequestError (a 400), never another
exception (which the server would answer with a 500), or gives a request that the layers after
it (cache key, model backend, renderer) can trust without checking it again."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from support.protocol_models import IMAGE, SIMPLE, STRINGS

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol import InferRequest, decode_request

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=30,
)
_names = st.sampled_from(["INPUT0", "INPUT1", "data_0", "OUTPUT0", "fc6_1", "x"])
_datatypes = st.sampled_from(["INT32", "FP32", "BYTES", "BOOL", "INT64", "nope"])
_shapes = st.lists(st.integers(min_value=-2, max_value=20), max_size=4)
_input = st.fixed_dictionaries(
    {"name": _names, "datatype": _datatypes, "shape": _shapes},
    optional={
        "data": st.one_of(_json, st.lists(_scalars, max_size=40)),
        "parameters": st.one_of(
            _json, st.fixed_dictionaries({"binary_data_size": st.integers(-5, 200)})
        ),
    },
)
_request = st.fixed_dictionaries(
    {"inputs": st.one_of(st.lists(_input, max_size=3), _json)},
    optional={
        "id": _json,
        "parameters": _json,
        "outputs": st.one_of(
            _json,
            st.lists(st.fixed_dictionaries({"name": _names}, optional={"parameters": _json})),
        ),
    },
)


@settings(max_examples=400, deadline=None)
@given(
    document=_request,
    tail=st.binary(max_size=200),
    header_shift=st.one_of(st.none(), st.integers(-20, 20)),
    model=st.sampled_from([SIMPLE, STRINGS, IMAGE]),
)
def test_any_body_is_decoded_or_refused_as_a_bad_request(
    document: dict[str, Any], tail: bytes, header_shift: int | None, model: Any
) -> None:
    header = orjson.dumps(document)
    length = None if header_shift is None else len(header) + header_shift
    with contextlib.suppress(BadRequestError):
        assert_trusted(decode_request(header + tail, length, model), model)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), length=st.one_of(st.none(), st.integers(-5, 400)))
def test_arbitrary_bytes_are_decoded_or_refused_as_a_bad_request(
    body: bytes, length: int | None
) -> None:
    with contextlib.suppress(BadRequestError):
        assert_trusted(decode_request(body, length, SIMPLE), SIMPLE)


def assert_trusted(request: InferRequest, model: ModelConfig) -> None:
    """What the layers after decoding rely on, since validation happens only there."""
    names = [tensor.name for tensor in request.inputs]
    assert len(names) == len(set(names))
    assert {spec.name for spec in model.inputs if not spec.optional} <= set(names)
    for tensor in request.inputs:
        spec = model.input(tensor.name)
        assert spec is not None
        assert tensor.datatype == spec.datatype
        expected = spec.shape(model.max_batch_size)
        assert len(tensor.shape) == len(expected)
        assert all(want in (-1, got) for got, want in zip(tensor.shape, expected, strict=True))
        elements = tensor.to_numpy()  # the data holds exactly the shape's elements
        if tensor.datatype == "BYTES":
            assert all(isinstance(element.decode(), str) for element in elements.ravel())
    for output in request.outputs:
        assert model.output(output.name) is not None
