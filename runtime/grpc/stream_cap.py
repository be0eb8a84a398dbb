"""``--grpc-max-streams``: how many ``ModelStreamInfer`` calls may be open at once.

A stream lives for as long as its client keeps it open, idle if it likes, and holds a thread
all that time (grpcio's synchronous API has no other way to serve one). Streams run on threads
of their own (``grpcio_seam``), never the unary calls', and are counted: past the cap a new one
ends at once with ``RESOURCE_EXHAUSTED`` (the code grpcio's own concurrency limit answers with),
before it reads a request, and its place is given back however it ends (finished, cancelled by
the client, past its deadline, the server stopping). The streams' threads are sized from the cap
(``server``), so an admitted stream always has one and a refusal is never queued behind them.

The cap wraps the stream-stream method handlers; unary handlers are left as they are and pay
nothing for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from cachefleet.runtime.grpc.handlers import Handler, with_behaviour
from cachefleet.runtime.grpc.places import Places

#: A stream-stream behaviour.
Streaming = Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]


class StreamCap:
    """At most ``limit`` streams open at once (see the module); thread-safe."""

    def __init__(self, limit: int) -> None:
        self._places = Places(limit)
        self.limit = limit

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._places.held

    @property
    def refusal(self) -> str:
        return (
            f"too many gRPC streams open: at most {self.limit} (--grpc-max-streams); "
            "close one or retry later"
        )

    def try_enter(self) -> bool:
        """Take a place, or False when all are taken."""
        return self._places.try_take()

    def leave(self) -> None:
        self._places.give_back()

    def capped(self, handlers: dict[str, Handler]) -> dict[str, Handler]:
        """``handlers`` with every stream-stream one counted."""
        counted = dict(handlers)
        for name, handler in handlers.items():
            if handler.stream_stream is not None:
                counted[name] = with_behaviour(handler, self._capped(handler.stream_stream))
        return counted

    def _capped(self, behaviour: Streaming) -> Streaming:
        @functools.wraps(behaviour)
        def capped(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            if not self.try_enter():
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.refusal)
            try:
                yield from behaviour(requests, context)
            finally:
                self.leave()

        return capped
