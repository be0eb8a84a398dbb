"""``cachefleet operator`` as its own process, against the emulator a test serves.

The command the chart runs (``--standalone --all-namespaces``, plus the test's flags), pointed
at the emulator through the kubeconfig ``support.kube.fixtures.serving`` wrote, its output in a
log file; stopped at the end with SIGINT, kopf's graceful stop, and waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path


@contextlib.asynccontextmanager
async def operator_process(log: Path, *flags: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """The operator process for the block, with ``flags`` after the chart's own."""
    import kubernetes.config.kube_config

    command = [sys.executable, "-m", "cachefleet.cli.main", "operator", "--standalone",
               "--all-namespaces", *flags]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION}
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), 20)
