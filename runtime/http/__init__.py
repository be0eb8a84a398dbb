"""HTTP: the FastAPI app, routes, and the one mapping of errors to responses. Top layer."""
