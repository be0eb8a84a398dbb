"""``--grpc-max-model-control``: model loads and unloads over gRPC, apart from every other call.

A ``RepositoryModelLoad`` or ``RepositoryModelUnload`` call holds its thread for as long as the
load takes (a large model: seconds), or waits for the one before it (model control loads one
model at a time), or for an unload's requests to drain. On the unary calls' few threads, a
handful of clients loading in a loop held all of them, and ``ServerLive``, metadata and
inference waited in grpcio's queue behind the loads. Here those two methods run on a pool of
their own (``grpcio_seam``), sized from the cap (``server``): at most ``limit`` are admitted at
once (one loads, the others wait their turn on their own threads); past it a call ends at once
with ``RESOURCE_EXHAUSTED`` (as a stream past ``--grpc-max-streams`` does) before it touches
the repository, and its place is given back however it ends. The pool has one thread more than
the cap, for refusals, so a refusal never waits behind the admitted calls (grpcio parses a
request before its behaviour runs, so a refused one is still read, within
``--max-request-size``, on this pool).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import grpc

from cachefleet.runtime.grpc.handlers import Handler, with_behaviour
from cachefleet.runtime.grpc.places import Places

#: The methods that change the model repository.
CONTROL_METHODS = frozenset({"RepositoryModelLoad", "RepositoryModelUnload"})
#: A unary behaviour.
Unary = Callable[[Any, grpc.ServicerContext], Any]


class ControlCap:
    """At most ``limit`` model control calls admitted at once (see the module)."""

    def __init__(self, limit: int) -> None:
        self._places = Places(limit)
        self.limit = limit

    @property
    def admitted(self) -> int:
        """Model control calls admitted now."""
        return self._places.held

    @property
    def refusal(self) -> str:
        return (
            f"too many model loads and unloads at once: at most {self.limit} "
            "(--grpc-max-model-control); retry when one has finished"
        )

    def capped(self, handlers: dict[str, Handler]) -> dict[str, Handler]:
        """``handlers`` with the model control ones counted."""
        counted = dict(handlers)
        for name in CONTROL_METHODS & handlers.keys():
            handler = handlers[name]
            assert handler.unary_unary is not None  # both are unary methods
            counted[name] = with_behaviour(handler, self._capped(handler.unary_unary))
        return counted

    def _capped(self, behaviour: Unary) -> Unary:
        @functools.wraps(behaviour)
        def capped(request: Any, context: grpc.ServicerContext) -> Any:
            if not self._places.try_take():
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.refusal)
            try:
                return behaviour(request, context)
            finally:
                self._places.give_back()

        return capped
