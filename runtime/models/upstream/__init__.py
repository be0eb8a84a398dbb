"""Upstream models: the models of another KServe v2 / Triton server, served through the cache.

``cachefleet serve --upstream grpc://HOST:PORT`` builds an :class:`UpstreamRepository` where it
would load the local repository: one more model source behind the same service, cache and
transports. Its models are ordinary :class:`~cachefleet.runtime.models.types.Model` objects whose
``run`` forwards the inputs to the upstream as one gRPC ``ModelInfer`` (the canonical tensor
bytes are already the protocol's raw contents), so every cache feature applies unchanged.

- ``client``: the gRPC channel, deadlines, the auth header, and the one translation of the
  upstream's status codes into client-facing errors.
- ``breaker``: stop calling an upstream that cannot be reached, and probe it to come back.
- ``identity``: the fingerprint of an upstream model version, from what the upstream reports
  (and the shared files, when this server sees the upstream's repository).
- ``model``: one upstream model version.
- ``repository``: the upstream's models, read at start and refreshed on a timer thread.

Layer rule: as the rest of ``models``: imports only the base (config, errors, tensor) and its
own package.
"""
