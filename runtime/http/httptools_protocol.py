"""The HTTP protocol given to uvicorn when httptools is installed: the one-write transport
(``one_write``) with the connection guard's deadlines and cap (``connection_guard``).

A class defined here, at module level, because uvicorn pickles it to its worker processes.
"""

from __future__ import annotations

from cachefleet.runtime.http.connection_guard import ConnectionGuard
from cachefleet.runtime.http.one_write import OneWriteHttpToolsProtocol


class GuardedHttpToolsProtocol(ConnectionGuard, OneWriteHttpToolsProtocol):
    """httptools, a response's head and body in one write, slow clients cut off."""
