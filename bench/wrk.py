"""Load from ``wrk`` with the ``infer.lua`` script: a generator that is not ours and costs little.

The request bodies are written to a folder the script reads at start; the script's ``done``
prints one ``CACHEFLEET_RESULT {json}`` line, parsed here.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

import orjson

from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.pinning import pinned

_RESULT_PREFIX = "CACHEFLEET_RESULT "


def available() -> bool:
    return shutil.which("wrk") is not None


def write_bodies(requests: RequestSet, folder: Path) -> None:
    """Write what ``infer.lua`` reads: meta.txt, the warm bodies and the miss template."""
    lines = [f"path={requests.path}", f"slot_format={requests.slot_format}"]
    lines.append(f"hit_count={len(requests.hit_bodies)}")
    lines += [f"header={name}: {value}" for name, value in requests.headers.items()]
    (folder / "meta.txt").write_text("\n".join(lines) + "\n")
    for index, body in enumerate(requests.hit_bodies):
        (folder / f"hit_{index}.bin").write_bytes(body)
    (folder / "miss_prefix.bin").write_bytes(requests.miss_prefix)
    (folder / "miss_suffix.bin").write_bytes(requests.miss_suffix)


def run(spec: LoadSpec, threads: int = 2) -> LoadResult:
    """Run wrk for ``spec``; raises :class:`BenchError` when wrk fails or prints no result."""
    if not available():
        raise BenchError("wrk is not installed (apt-get install wrk)")
    threads = max(1, min(threads, spec.connections))
    with tempfile.TemporaryDirectory(prefix="cachefleet-wrk-") as folder:
        write_bodies(spec.requests, Path(folder))
        script = resources.files("cachefleet.bench").joinpath("infer.lua")
        with resources.as_file(script) as script_path:
            command = [
                "wrk", f"-t{threads}", f"-c{spec.connections}",
                f"-d{whole_seconds(spec.duration_s)}s",
                "--timeout", "30s", "-s", str(script_path), spec.base_url,
                "--", folder, str(spec.miss_per_10000), str(spec.nonce),
            ]  # fmt: skip
            completed = subprocess.run(
                pinned(command, spec.cpus),
                capture_output=True,
                text=True,
                timeout=spec.duration_s + 120,
                check=False,
            )
    return parse_output(completed.stdout, completed.stderr, completed.returncode)


def whole_seconds(duration_s: float) -> int:
    """wrk takes whole seconds only: round, and run at least one."""
    return max(1, round(duration_s))


def parse_output(stdout: str, stderr: str, returncode: int) -> LoadResult:
    """The result line of ``infer.lua``'s ``done``, as a :class:`LoadResult`."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith(_RESULT_PREFIX)), None)
    if returncode != 0 or line is None:
        last = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
        raise BenchError(
            f"wrk failed (exit {returncode}): {last}\n{stdout[-2000:]}\n{stderr[-2000:]}"
        )
    data = orjson.loads(line[len(_RESULT_PREFIX) :])
    latency = data["latency_us"]
    return LoadResult(
        requests=int(data["requests"]),
        duration_s=int(data["duration_us"]) / 1e6,
        errors=sum(int(count) for count in data["errors"].values()),
        p50_ms=latency["p50"] / 1000,
        p90_ms=latency["p90"] / 1000,
        p99_ms=latency["p99"] / 1000,
        generator="wrk",
    )
