"""The HTTP protocol given to uvicorn when httptools is installed: memoized infer answers
written by the protocol itself (``memo_protocol``), a response's head held back and written with
its body (``head_holding``), with the connection guard's deadlines and cap
(``connection_guard``).

A class defined here, at module level, because uvicorn pickles it to its worker processes.
"""

from __future__ import annotations

from cachefleet.runtime.http.connection_guard import ConnectionGuard
from cachefleet.runtime.http.head_holding import HeadHoldingHttpToolsProtocol
from cachefleet.runtime.http.memo_protocol import MemoAnswering


class GuardedHttpToolsProtocol(ConnectionGuard, MemoAnswering, HeadHoldingHttpToolsProtocol):
    """httptools, memoized answers from the protocol, a response's head and body in one
    write, slow clients cut off.

    The guard is the outermost layer: it judges a read once everything beneath it has done
    with it, so a request the memo holds (its head in, no cycle made yet) has been answered or
    handed on by then, and its body is never mistaken for an overlong head."""
