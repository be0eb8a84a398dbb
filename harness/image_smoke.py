"""Smoke tests of the built images, run by ``scripts/build-images`` after it builds them.

``python -m harness.image_smoke runtime --http-port P --grpc-port G`` talks to a runtime
container the script started (read-only root, every capability dropped, the sample models
mounted): it waits for readiness, sends the same ``simple`` inference twice over HTTP and
expects ``X-Cache: miss`` then ``hit-local`` with the right sums, and asks gRPC for ServerLive
and a ModelInfer with tritonclient.grpc. What a user of the image sees, through the published
ports.

``python -m harness.image_smoke copy-command FILE`` prints, one per line, the model volume's mount
path and the shell script of the ``copy-models`` init container the operator renders for the
service in FILE (``examples/quickstart.yaml``): the script copies the sample repository out of
the runtime image, and ``scripts/build-images`` runs it in the image exactly so before serving
what it copied, as a pod of the quickstart does.

``python -m harness.image_smoke operator --image IMAGE`` starts the Kubernetes emulator
(:mod:`harness.kube_emulator`) on a loopback port, runs the operator image against it on the
host's network with a kubeconfig mounted in, creates one CachedInferenceService with a managed
Redis, and waits until the operator created every child and wrote its status
(:func:`harness.operator_scale.converged`). The container is removed whatever happens; its log
is printed when the check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from cachefleet.bench.processes import free_port
from harness.operator_scale import CIS, NAMESPACE, SHAPES, Service, converged, lookup

TIMEOUT_S = 120.0
OPERATOR_CONTAINER = "cachefleet-smoke-operator"


class SmokeError(Exception):
    """The image did not do what a user of it expects."""


# ---------------------------------------------------------------------------------------------
# The runtime image
# ---------------------------------------------------------------------------------------------


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def wait_ready(base: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if _http("GET", f"{base}/v2/health/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SmokeError(f"{base}/v2/health/ready did not answer 200 within {timeout_s:g} s")


def infer_twice(base: str) -> list[str]:
    """The same ``simple`` request twice over HTTP: each answer's X-Cache, sums checked."""
    a, b = list(range(16)), [1] * 16
    body = json.dumps({
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": b},
        ]
    }).encode()  # fmt: skip
    seen = []
    for _ in range(2):
        status, headers, answer = _http("POST", f"{base}/v2/models/simple/infer", body)
        if status != 200:
            raise SmokeError(f"infer answered {status}: {answer[:200]!r}")
        outputs = {o["name"]: o["data"] for o in json.loads(answer)["outputs"]}
        if outputs["OUTPUT0"] != [x + y for x, y in zip(a, b, strict=True)]:
            raise SmokeError(f"OUTPUT0 is not the sum: {outputs['OUTPUT0']}")
        seen.append(headers.get("X-Cache") or headers.get("x-cache") or "")
    return seen


def grpc_infer(address: str) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    try:
        if not client.is_server_live():
            raise SmokeError(f"gRPC ServerLive at {address} answered not live")
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        result = client.infer("simple", inputs)
        if not np.array_equal(result.as_numpy("OUTPUT0"), data * 2):
            raise SmokeError(f"gRPC OUTPUT0 is not the sum: {result.as_numpy('OUTPUT0')}")
    finally:
        client.close()


def check_runtime(http_port: int, grpc_port: int) -> None:
    base = f"http://127.0.0.1:{http_port}"
    wait_ready(base, TIMEOUT_S)
    seen = infer_twice(base)
    if seen != ["miss", "hit-local"]:
        raise SmokeError(f"X-Cache of the same request twice: {seen}, not miss then hit-local")
    grpc_infer(f"127.0.0.1:{grpc_port}")
    print(f"image_smoke: runtime serves: ready, HTTP X-Cache {seen[0]} then {seen[1]}, gRPC infer")


# ---------------------------------------------------------------------------------------------
# The operator image
# ---------------------------------------------------------------------------------------------


def _kubeconfig(folder: Path, url: str) -> Path:
    import yaml

    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "kmock", "user": {"token": "smoke"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
    }))  # fmt: skip
    path.chmod(0o644)  # the image's unprivileged user reads it through the bind mount
    return path


def _operator_command(engine: str, image: str, kubeconfig: Path) -> list[str]:
    """The container: host network (the emulator listens on loopback), locked down as the
    chart runs it; Redis calls for cache figures go to a closed port and fail at once."""
    return [
        engine, "run", "--detach", "--pull=never", "--name", OPERATOR_CONTAINER,
        "--network=host", "--read-only", "--cap-drop=ALL", "--tmpfs", "/tmp",
        "--volume", f"{kubeconfig}:/etc/cachefleet/kubeconfig:ro",
        "--env", "KUBECONFIG=/etc/cachefleet/kubeconfig",
        "--env", f"CACHEFLEET_OPERATOR_REDIS_ADDRESS=127.0.0.1:{free_port()}",
        "--env", "CACHEFLEET_OPERATOR_REDIS_TIMEOUT=0.2",
        image, "operator", "--standalone", "--all-namespaces",
        f"--liveness=http://127.0.0.1:{free_port()}/healthz",
    ]  # fmt: skip


async def _engine(*args: str, check: bool = False) -> str:
    """Run the container engine; its output (stdout and stderr), or SmokeError when ``check``."""
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    if check and process.returncode != 0:
        raise SmokeError(f"{' '.join(args[:2])} failed: {output.decode()}")
    return output.decode()


async def _converge(engine: str, image: str) -> None:
    import aiohttp
    import kmock

    from harness.kube_emulator import Cluster

    service = Service("smoke", SHAPES[0])  # a managed Redis and the runtime's children
    async with Cluster() as cluster, kmock.Server(cluster):
        url = str(cluster.url).rstrip("/")
        with tempfile.TemporaryDirectory() as folder:
            kubeconfig = _kubeconfig(Path(folder), url)
            await _engine(engine, "rm", "--force", OPERATOR_CONTAINER)
            await _engine(*_operator_command(engine, image, kubeconfig), check=True)
            try:
                path = (
                    f"/apis/cachefleet.io/v1alpha1/namespaces/{NAMESPACE}/cachedinferenceservices"
                )
                async with (
                    aiohttp.ClientSession(base_url=url) as session,
                    session.post(path, json=service.body()) as response,
                ):
                    if response.status >= 300:
                        raise SmokeError(f"creating the object: {await response.text()}")
                get = lookup(cluster)
                deadline = time.monotonic() + TIMEOUT_S
                while not converged(get, service):
                    if time.monotonic() > deadline:
                        status = (get(CIS, service.name) or {}).get("status")
                        raise SmokeError(f"no convergence in {TIMEOUT_S:g} s; status {status}")
                    await asyncio.sleep(0.5)
                # The image's LD_PRELOAD took: the process maps jemalloc (see the Dockerfile).
                maps = await _engine(engine, "exec", OPERATOR_CONTAINER, "cat", "/proc/1/maps")
                if "libjemalloc" not in maps:
                    raise SmokeError(f"the operator does not run on jemalloc: {maps[-500:]}")
            except BaseException:
                sys.stderr.write(await _engine(engine, "logs", OPERATOR_CONTAINER))
                raise
            finally:
                await _engine(engine, "rm", "--force", OPERATOR_CONTAINER)
    children = ", ".join(
        f"{resource.rsplit('/', 1)[1]}/{name.format(service.name)}"
        for resource, name in service.shape.children
    )
    print(f"image_smoke: operator (on jemalloc) reconciled one CachedInferenceService: {children}")


# ---------------------------------------------------------------------------------------------
# The quickstart's copy out of the runtime image
# ---------------------------------------------------------------------------------------------


def copy_command(path: Path) -> tuple[str, str]:
    """The ``copy-models`` init container's mount path and ``sh -c`` script for ``path``."""
    from cachefleet.operator.render_command import render_file

    for child in render_file(path):
        if child["kind"] == "Deployment":
            for container in child["spec"]["template"]["spec"].get("initContainers", []):
                if container["name"] == "copy-models":
                    shell, flag, script = container["command"]
                    assert (shell, flag) == ("sh", "-c"), container["command"]
                    return container["volumeMounts"][0]["mountPath"], script
    raise SmokeError(f"{path} renders no copy-models init container")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.image_smoke", description=__doc__)
    commands = parser.add_subparsers(dest="target", required=True)
    runtime = commands.add_parser("runtime", help="check a running runtime container")
    runtime.add_argument("--http-port", type=int, required=True)
    runtime.add_argument("--grpc-port", type=int, required=True)
    copy = commands.add_parser("copy-command", help="print a service's copy-models script")
    copy.add_argument("file", type=Path)
    operator = commands.add_parser("operator", help="run the operator image against an emulator")
    operator.add_argument("--image", required=True)
    operator.add_argument("--engine", default="podman")
    args = parser.parse_args(argv)
    try:
        if args.target == "runtime":
            check_runtime(args.http_port, args.grpc_port)
        elif args.target == "copy-command":
            print("\n".join(copy_command(args.file)))
        else:
            asyncio.run(_converge(args.engine, args.image))
    except SmokeError as error:
        print(f"image_smoke: {args.target}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
