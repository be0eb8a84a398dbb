"""HTTP: the FastAPI app, the infer fast path in front of it, routes, and the one mapping of
errors to responses. Top layer."""

from cachefleet.runtime.http.app import create_app

__all__ = ["create_app"]
