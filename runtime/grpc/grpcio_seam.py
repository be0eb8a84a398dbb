"""The one place the gRPC server reaches below grpcio's public API: calls on their own threads.

grpcio's synchronous server runs every call on the one thread pool it is given. A
``ModelStreamInfer`` call holds its thread for as long as the client keeps the stream open, and
a model load for as long as the load (or the one before it) takes. grpcio reads an attribute of
a method's behaviour, ``experimental_thread_pool``, and runs that method's calls on the pool it
names instead (``grpc._server._select_thread_pool_for_behavior``, for every kind of method):
that keeps idle streams and model loads off the unary calls' threads with a stock
``ThreadPoolExecutor`` each. It is not documented, so ``pyproject.toml`` bounds grpcio to the
releases it is tested with, and ``tests/runtime/test_grpc_stream_cap.py`` fails when a call no
longer runs on its own pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent import futures

from cachefleet.runtime.grpc.handlers import Handler

#: The attribute grpcio's synchronous server reads on a behaviour.
_POOL_ATTRIBUTE = "experimental_thread_pool"


def on_own_threads(handlers: Iterable[Handler], pool: futures.ThreadPoolExecutor) -> None:
    """Have grpcio run the calls of every handler in ``handlers`` on ``pool``."""
    for handler in handlers:
        behaviour = (
            handler.unary_unary
            or handler.unary_stream
            or handler.stream_unary
            or handler.stream_stream
        )
        setattr(behaviour, _POOL_ATTRIBUTE, pool)
