"""HTTP, one of the two sibling transports: the FastAPI app over a runtime slot, with the infer
front before it (``infer_front``: each infer request described once by ``infer_request`` and
answered by the one infer endpoint, memo hits from the runtime's answer memo included), the
other routes, the one mapping of errors to responses, and the one module that reaches below
ASGI into uvicorn (``uvicorn_protocol``). It receives the runtime from the composition root
and never imports ``grpc``."""

from cachefleet.runtime.http.app import create_app

__all__ = ["create_app"]
