"""The harness's one error: something the benchmark needs is missing or misbehaved."""

from __future__ import annotations


class BenchError(Exception):
    """A benchmark could not run: a process did not start, a tool is missing, a reply was bad.

    The message says what to install or look at; the commands print it instead of a traceback.
    """
