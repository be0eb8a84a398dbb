"""Where the server's time goes: py-spy samples during a scenario, summed by layer.

``cachefleet bench --profile`` runs ``py-spy record`` (from PyPI, in the ``bench`` extra) on
the server for the measured window of each scenario it profiles, and attributes every sample
to the innermost frame that belongs to a known layer (our protocol, cache, redis-py, uvicorn,
Starlette...), so the report can say which hot path to fix.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from cachefleet.bench.pinning import pinned

#: (substring of a frame's file, layer), innermost match wins; the first rule that matches.
_LAYERS: tuple[tuple[str, str], ...] = (
    ("onnxruntime", "model run (onnxruntime)"),
    ("runtime/cache/key.py", "cache key (BLAKE3)"),
    ("blake3", "cache key (BLAKE3)"),
    ("redis/", "Redis client (redis-py)"),
    ("runtime/cache/memo.py", "response memo (ours)"),
    ("runtime/cache/", "cache tiers (ours)"),
    ("runtime/protocol/", "protocol decode/encode (ours)"),
    ("prometheus_client", "metrics (prometheus-client)"),
    ("runtime/http/infer_answers.py", "response memo (ours)"),
    ("runtime/http/uvicorn_protocol.py", "uvicorn/httptools"),
    ("runtime/http/infer_endpoint.py", "infer endpoint (ours)"),
    ("runtime/http/", "HTTP routes and service (ours)"),
    ("runtime/service/", "HTTP routes and service (ours)"),
    ("starlette/", "Starlette/FastAPI"),
    ("fastapi/", "Starlette/FastAPI"),
    ("uvicorn/", "uvicorn/httptools"),
    ("httptools", "uvicorn/httptools"),
    ("concurrent/futures", "thread pool"),
    ("threading.py", "thread pool"),
    ("asyncio/runners.py", "event loop (uvloop's C loop, incl. waiting)"),
    ("asyncio/", "asyncio"),
)
#: Leaf frames of a thread that is only waiting (py-spy still samples it): left out.
_IDLE_LEAVES = ("concurrent/futures/thread.py:81)", "(threading.py:", "(queue.py:")


def executable() -> str | None:
    """py-spy next to this Python (a venv's bin) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def start(pid: int, duration_s: float, output: Path, cpus: str | None) -> subprocess.Popen[bytes]:
    """Sample ``pid`` for ``duration_s`` into ``output`` (py-spy's raw, collapsed stacks)."""
    binary = executable()
    assert binary is not None
    command = [
        binary, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))),
        "--rate", "200", "--format", "raw", "--output", str(output), "--nonblocking",
    ]  # fmt: skip
    return subprocess.Popen(
        pinned(command, cpus), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def summarize(raw: Path) -> dict[str, float]:
    """Share of busy samples per layer, largest first; empty when py-spy wrote nothing.

    Thread-pool workers waiting for work are left out. The event loop's own frame covers
    uvloop's C code, waiting in epoll included, so it is labelled as such.
    """
    counts: Counter[str] = Counter()
    try:
        lines = raw.read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        stack, _, number = line.rpartition(" ")
        frames = stack.split(";")
        if not number.isdigit() or any(marker in frames[-1] for marker in _IDLE_LEAVES):
            continue
        counts[_layer(frames)] += int(number)
    total = sum(counts.values())
    return {layer: count / total for layer, count in counts.most_common()} if total else {}


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        for needle, layer in _LAYERS:
            if needle in frame:
                return layer
    return "other"
