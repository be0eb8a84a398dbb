"""HTTP: the FastAPI app, routes, and the one mapping of errors to responses. Top layer."""

from cachefleet.runtime.http.app import create_app

__all__ = ["create_app"]
