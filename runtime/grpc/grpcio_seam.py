"""The one place the gRPC server reaches below grpcio's public API: streams' own threads.

grpcio's synchronous server runs every call on the one thread pool it is given, and a
``ModelStreamInfer`` call holds its thread for as long as the client keeps the stream open.
grpcio reads an attribute of a method's behaviour, ``experimental_thread_pool``, and runs that
method's calls on the pool it names instead (``grpc._server._select_thread_pool_for_behavior``):
that keeps idle streams off the unary calls' threads with a stock ``ThreadPoolExecutor`` each.
It is not documented, so ``pyproject.toml`` bounds grpcio to the releases it is tested with, and
``tests/runtime/test_grpc_stream_cap.py`` fails when a stream no longer runs on its own pool.
"""

from __future__ import annotations

from concurrent import futures

from cachefleet.runtime.grpc.handlers import Handler

#: The attribute grpcio's synchronous server reads on a behaviour.
_POOL_ATTRIBUTE = "experimental_thread_pool"


def on_own_threads(handlers: dict[str, Handler], pool: futures.ThreadPoolExecutor) -> None:
    """Have grpcio run the calls of every stream-stream handler in ``handlers`` on ``pool``."""
    for handler in handlers.values():
        if handler.request_streaming and handler.response_streaming:
            setattr(handler.stream_stream, _POOL_ATTRIBUTE, pool)
