"""The HTTP protocol given to uvicorn when httptools is installed: a response's head held back
and written with its body (``head_holding``), with the connection guard's deadlines and cap
(``connection_guard``).

A class defined here, at module level, because uvicorn pickles it to its worker processes.
"""

from __future__ import annotations

from cachefleet.runtime.http.connection_guard import ConnectionGuard
from cachefleet.runtime.http.head_holding import HeadHoldingHttpToolsProtocol


class GuardedHttpToolsProtocol(ConnectionGuard, HeadHoldingHttpToolsProtocol):
    """httptools, a response's head and body in one write, slow clients cut off."""
