"""Restricted APIs, Triton's way: each admin endpoint without and with its header, HTTP and gRPC.

Two servers: one restricts the admin groups (its inference stays open, and serves), the other
restricts inference too, with another key. Refusals are Triton's: HTTP 403 with ``This API is
restricted, expecting header '<key>'``; gRPC UNAVAILABLE with ``This protocol is restricted,
expecting header 'triton-grpc-protocol-<key>'``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import loopback
from support.processes import CACHEFLEET, ServerProcess
from tritonclient.utils import InferenceServerException

TOKEN = "admin-token-3f9c2a7e"
INFER_TOKEN = "infer-token-81b0"
ADMIN = "model-repository,shared-memory,cache,statistics,model-config"
GRPC_KEY = "triton-grpc-protocol-admin-key"
HTTP_REFUSAL = {"error": "This API is restricted, expecting header 'admin-key'"}
GRPC_REFUSAL = f"This protocol is restricted, expecting header '{GRPC_KEY}'"

#: Every admin endpoint: (method, path, JSON body).
ADMIN_ENDPOINTS: list[tuple[str, str, Any]] = [
    ("POST", "/v2/repository/index", None),
    ("POST", "/v2/repository/models/simple/unload", None),
    ("POST", "/v2/repository/models/simple/load", None),
    ("POST", "/v2/models/simple/cache/flush", None),
    ("GET", "/v2/models/stats", None),
    ("GET", "/v2/models/simple/stats", None),
    ("GET", "/v2/models/simple/versions/1/stats", None),
    ("GET", "/v2/models/simple/config", None),
    ("GET", "/v2/systemsharedmemory/status", None),
    ("GET", "/v2/systemsharedmemory/region/r/status", None),
    (
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        {"key": "/cachefleet-test-none", "offset": 0, "byte_size": 8},
    ),
    ("POST", "/v2/systemsharedmemory/unregister", None),
    ("POST", "/v2/systemsharedmemory/region/r/unregister", None),
    ("GET", "/v2/cudasharedmemory/status", None),
    ("POST", "/v2/cudasharedmemory/region/r/register", {"device_id": 0, "byte_size": 8}),
]
OPEN_ENDPOINTS = [
    ("GET", "/v2/health/live"),
    ("GET", "/v2/health/ready"),
    ("GET", "/v2"),
    ("GET", "/v2/models/simple"),
    ("GET", "/v2/models/simple/ready"),
    ("GET", "/metrics"),
]


@pytest.fixture(scope="module")
def admin_restricted(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server for the module: every test that unloads ``simple`` loads it again."""
    server = ServerProcess(
        [
            "--model-repository", str(model_repository),
            "--model-control-mode", "explicit", "--load-model", "simple",
            "--http-restricted-api", f"{ADMIN}:admin-key={TOKEN}",
            "--grpc-restricted-protocol", f"{ADMIN}:admin-key={TOKEN}",
        ],
        tmp_path_factory.mktemp("admin-restricted"),
    )  # fmt: skip
    server.start()
    yield server
    server.stop()


@pytest.fixture
def all_restricted(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    """Admin groups and inference restricted, given through the environment (two lines)."""
    both = f"{ADMIN}:admin-key={TOKEN}\ninference:infer-key={INFER_TOKEN}"
    return make_server(
        "--workers",
        "2",
        env={
            "CACHEFLEET_HTTP_RESTRICTED_API": both,
            "CACHEFLEET_GRPC_RESTRICTED_PROTOCOL": both,
        },
    )


@pytest.fixture
def grpc_client(admin_restricted: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(admin_restricted.grpc_url) as client:
        yield client


def _inputs(module: Any) -> list[Any]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    return inputs


def _call(server: ServerProcess, method: str, path: str, body: Any, **headers: str) -> Any:
    return loopback.request(
        method, f"{server.base_url}{path}", json=body, headers=headers, timeout=30
    )


def test_every_admin_endpoint_over_http_needs_the_header(admin_restricted: ServerProcess) -> None:
    for method, path, body in ADMIN_ENDPOINTS:
        for headers in ({}, {"admin-key": "wrong"}, {"admin-key": TOKEN[:-1]}, {"x": TOKEN}):
            refused = _call(admin_restricted, method, path, body, **headers)
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json() == HTTP_REFUSAL
        allowed = _call(admin_restricted, method, path, body, **{"Admin-Key": TOKEN})
        assert allowed.status_code != 403, (path, allowed.text)
        assert allowed.status_code < 500 or path.endswith("register"), (path, allowed.text)
    for method, path in OPEN_ENDPOINTS:
        assert _call(admin_restricted, method, path, None).status_code == 200, path


def test_a_restricted_server_still_serves_inference(admin_restricted: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(admin_restricted.url)
    result = client.infer("simple", _inputs(httpclient))
    assert result.as_numpy("OUTPUT0") is not None
    with pytest.raises(InferenceServerException, match="This API is restricted"):
        client.load_model("simple")
    client.load_model("simple", headers={"admin-key": TOKEN})
    with grpcclient.InferenceServerClient(admin_restricted.grpc_url) as grpc:
        assert grpc.infer("simple", _inputs(grpcclient)).as_numpy("OUTPUT1") is not None
        assert grpc.is_server_ready()
        assert grpc.get_model_metadata("simple").name == "simple"
    client.close()


GRPC_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("get_model_repository_index", ()),
    ("unload_model", ("simple",)),
    ("load_model", ("simple",)),
    ("get_inference_statistics", ("simple",)),
    ("get_model_config", ("simple",)),
    ("get_system_shared_memory_status", ()),
    ("register_system_shared_memory", ("r", "/cachefleet-test-none", 8)),
    ("unregister_system_shared_memory", ()),
    ("get_cuda_shared_memory_status", ()),
    ("unregister_cuda_shared_memory", ()),
]


def test_every_admin_call_over_grpc_needs_the_metadata(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    for name, args in GRPC_CALLS:
        call = getattr(grpc_client, name)
        for headers in (None, {GRPC_KEY: "wrong"}, {"admin-key": TOKEN}):
            with pytest.raises(InferenceServerException) as refused:
                call(*args, headers=headers)
            assert refused.value.status() == "StatusCode.UNAVAILABLE", name
            assert refused.value.message() == GRPC_REFUSAL, name
        if name == "register_system_shared_memory":  # let through, and refused for its key
            with pytest.raises(InferenceServerException, match=r"INVALID_ARGUMENT|shared memory"):
                call(*args, headers={GRPC_KEY: TOKEN})
        else:
            call(*args, headers={GRPC_KEY: TOKEN})


def test_restricted_inference_needs_its_own_key_on_both_transports(
    all_restricted: ServerProcess,
) -> None:
    raw = _call(all_restricted, "POST", "/v2/models/simple/infer", {"inputs": []})
    assert raw.status_code == 403, raw.text
    assert "x-cache" not in raw.headers, "a refusal is no cache answer"
    client = httpclient.InferenceServerClient(all_restricted.url)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("simple", _inputs(httpclient))
    assert refused.value.status() == "403"
    assert "expecting header 'infer-key'" in str(refused.value.message())
    with pytest.raises(InferenceServerException, match="'infer-key'"):  # the admin key is not it
        client.infer("simple", _inputs(httpclient), headers={"admin-key": TOKEN})
    for _ in range(3):  # both workers got the restrictions
        result = client.infer("simple", _inputs(httpclient), headers={"infer-key": INFER_TOKEN})
        assert result.as_numpy("OUTPUT0") is not None
    client.close()

    with grpcclient.InferenceServerClient(all_restricted.grpc_url) as grpc:
        with pytest.raises(InferenceServerException) as caught:
            grpc.infer("simple", _inputs(grpcclient))
        assert caught.value.status() == "StatusCode.UNAVAILABLE"
        key = "triton-grpc-protocol-infer-key"
        assert grpc.infer("simple", _inputs(grpcclient), headers={key: INFER_TOKEN})
        answers: list[Any] = []
        grpc.start_stream(lambda result, error: answers.append(error or result))
        # The refusal ends the stream at once: it may be there before the request is sent.
        with contextlib.suppress(InferenceServerException):
            grpc.async_stream_infer("simple", _inputs(grpcclient))
        grpc.stop_stream()
        assert len(answers) == 1
        assert isinstance(answers[0], InferenceServerException)
        assert "This protocol is restricted" in str(answers[0].message())
        answers.clear()
        grpc.start_stream(
            lambda result, error: answers.append(error or result), headers={key: INFER_TOKEN}
        )
        grpc.async_stream_infer("simple", _inputs(grpcclient))
        grpc.stop_stream()
        assert answers[0].as_numpy("OUTPUT0") is not None


def test_cachefleet_flush_sends_the_header(admin_restricted: ServerProcess) -> None:
    command = [*CACHEFLEET, "flush", "--model", "simple", "--server", admin_restricted.url]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "403" in refused.stderr
    assert "expecting header 'admin-key'" in refused.stderr
    env = {**os.environ, "CACHEFLEET_HTTP_RESTRICTED_API": f"{ADMIN}:admin-key={TOKEN}"}
    from_environment = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert from_environment.returncode == 0, from_environment.stderr
    assert '"removed"' in from_environment.stdout
    with_header = subprocess.run(
        [*command, "--header", f"admin-key: {TOKEN}"], capture_output=True, text=True, timeout=60
    )
    assert with_header.returncode == 0, with_header.stderr


def test_a_token_past_ascii_is_refused_when_the_settings_are_read(
    model_repository: Any, tmp_path: Any
) -> None:
    """One encoding for every route and transport: a value no HTTP header and no gRPC metadata
    carries alike (it was compared as UTF-8 on the infer route, latin-1 on the others) stops
    the start with one line naming the flag, and the value is never echoed."""
    for flag, env in (
        (["--http-restricted-api", "inference,metadata:tok=s\u00e9same"], {}),
        ([], {"CACHEFLEET_GRPC_RESTRICTED_PROTOCOL": "health:tok=s\u00e9same"}),
        (["--http-restricted-api", "inference:tok= padded"], {}),
    ):
        result = subprocess.run(
            [*CACHEFLEET, "serve", "--model-repository", str(model_repository), *flag],
            capture_output=True, text=True, timeout=120, env={**os.environ, **env},
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "-restricted-" in lines[0]
        assert "printable ASCII" in lines[0]
        assert "same" not in lines[0]


def test_a_repeated_header_is_judged_by_its_first_value_on_every_route(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--http-restricted-api", "inference,metadata:tok=right")
    document = {
        "inputs": [
            {"name": name, "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for first, second, status in (("wrong", "right", 403), ("right", "wrong", 200)):
            headers = [("tok", first), ("tok", second)]
            infer = client.post("/v2/models/simple/infer", json=document, headers=headers)
            metadata = client.get("/v2/models/simple", headers=headers)
            assert (infer.status_code, metadata.status_code) == (status, status), first
