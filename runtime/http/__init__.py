"""HTTP, one of the two sibling transports: the FastAPI app over a runtime slot, the one infer
endpoint (with its shortcut in front of the router and the memo of rendered responses around
the service's answer), the routes, and the one mapping of errors to responses. It receives the
runtime from the composition root and never imports ``grpc``."""

from cachefleet.runtime.http.app import create_app

__all__ = ["create_app"]
