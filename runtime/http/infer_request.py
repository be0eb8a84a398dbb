"""An HTTP infer request, decided once: its route and the headers that matter, read in one pass.

:class:`InferHeads` turns an ASGI scope into an :class:`InferHead` (or None: not an infer path)
before anything else looks at the request: the model and version the path names, the declared
body length, the binary extension's header length, the body's encoding, the encodings the client
accepts, its cache directives, the ``--http-restricted-api`` verdict for the inference group, and
whether its answer may come from the memo. Everything after it (the memo lookup, the endpoint,
the body reader, the budget's charge, tracing, the error mapping) reads the head: no later step
parses the path, scans the headers or checks the restriction again. A head the HTTP protocol
made below ASGI (``uvicorn_protocol``: a small request it asked the memo about) comes to the
ASGI path in the request's scope (:data:`HEAD`), with the memo key it was looked up by when the
memo had no answer for it (:attr:`InferHead.memo_key`), or word that the memo holds nothing of
its model (:attr:`InferHead.memo_passed`), so that neither is made or counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Scope

from cachefleet.runtime.cache.api import CacheDirectives
from cachefleet.runtime.http.body import declared_length
from cachefleet.runtime.http.restricted import ApiGuard
from cachefleet.runtime.protocol.cache_control import directives_from
from cachefleet.runtime.service.memo_answers import MemoAnswers, MemoKey

#: ``scope["extensions"][HEAD]``: the request's :class:`InferHead` when the HTTP protocol has
#: described it already (see the module), None there when it found no infer request in it.
HEAD = "cachefleet.infer_head"
_PREFIX = "/v2/models/"
_SUFFIX = "/infer"


@dataclass(slots=True)
class InferHead:
    """What one infer request is, as its head says (see the module). Nothing changes it
    once made but :attr:`memo_key` or :attr:`memo_passed`, set once by asking the memo; it is
    not frozen only because a frozen dataclass pays ``object.__setattr__`` per field, on every
    request."""

    method: str
    #: The request's path (for error logs and spans).
    path: str
    #: The model and version as the path names them (None: the latest).
    model: str
    version: str | None
    #: ``Content-Length`` when it is a number, else None (chunked, absent or garbage).
    declared: int | None
    #: ``Inference-Header-Content-Length`` (None: absent).
    header_length: int | None
    #: Why the header length is refused (not an integer), said once the body is in (the body
    #: limit comes first). A message, not the error: an error kept here and raised would make
    #: a cycle (the head, its error, the traceback, the frame holding the head) that only the
    #: cyclic collector frees.
    bad_header: str | None
    #: ``Content-Encoding`` when the body must be inflated (None: absent or ``identity``).
    encoding: str | None
    #: ``Accept-Encoding`` (None: the answer goes out as rendered).
    accept: str | None
    directives: CacheDirectives
    #: Why the inference group's restriction refuses the request; None when it admits it.
    refusal: str | None
    #: Whether the memo may answer (the service's rule, ``MemoAnswers.applies``, and a sound
    #: header length); whether there is a memo is the runtime's (``Runtime.memo_answers``).
    memo: bool
    #: The request's memo key when the memo was asked about it already (below ASGI, with its
    #: whole body) and had no answer: the endpoint neither hashes its body nor looks it up
    #: again, and keeps its answer under this key when the memo may. None: not asked yet.
    memo_key: MemoKey | None = None
    #: Whether the memo was asked and said it holds nothing of the request's model
    #: (``MemoAnswers.holds``, counted as a miss then): the request is neither hashed nor
    #: looked up, and its key is made only if its answer is kept.
    memo_passed: bool = False


class InferHeads:
    """Describes the infer requests of a server whose restrictions ``guard`` judges (the app's
    one guard, see ``restricted``)."""

    def __init__(self, guard: ApiGuard) -> None:
        self._guard = guard
        #: The (lower-case) header the restriction reads, b"" when there is none.
        self._header = guard.header("inference") or b""

    def __call__(self, scope: Scope) -> InferHead | None:
        """The head of ``scope``'s request when its path is an infer path, else None."""
        path: str = scope["path"]
        route = infer_route(path)
        if route is None:
            return None
        declared = header_length = bad_header = encoding = accept = cache_control = None
        presented = None
        restricted = self._header
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = declared_length(value)
            elif name == b"inference-header-content-length":
                header_length, bad_header = _header_length(value)
            elif name == b"content-encoding":
                encoding = None if value == b"identity" else value.decode("latin-1")
            elif name == b"accept-encoding":
                accept = value.decode("latin-1")
            elif name == b"cache-control":
                cache_control = value.decode("latin-1")
            elif name == restricted and presented is None:
                presented = value  # the first, as every other route judges (``restricted``)
        refusal = None if not restricted else self._guard.refusal("inference", presented)
        directives = directives_from(cache_control)
        return InferHead(
            scope["method"], path, route[0], route[1], declared, header_length, bad_header,
            encoding, accept, directives, refusal,
            memo=MemoAnswers.applies(directives) and bad_header is None,
        )  # fmt: skip


def infer_route(path: str) -> tuple[str, str | None] | None:
    """``(model, version)`` of an infer path, None for any other path: ``/v2/models/{m}/infer``
    and ``/v2/models/{m}/versions/{v}/infer``, each segment non-empty and free of ``/``."""
    if not path.startswith(_PREFIX) or not path.endswith(_SUFFIX):
        return None
    parts = path[len(_PREFIX) : -len(_SUFFIX)].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], None
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return parts[0], parts[2]
    return None


def _header_length(value: bytes) -> tuple[int | None, str | None]:
    """The binary extension's header length, or why it is refused once the body is read."""
    try:
        return int(value), None
    except ValueError:
        text = value.decode("latin-1")
        return None, f"Inference-Header-Content-Length must be an integer, got {text!r}"
