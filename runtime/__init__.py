"""The inference server: KServe v2 / Triton HTTP protocol over ONNX Runtime, with a response cache.

Layers, highest first, each importing only those below it (checked by import-linter, see
``pyproject.toml``): the commands (``serve_command``, ``flush_command``, ``samples_command``) ->
``server`` (what uvicorn serves: opens the runtime, starts both transports) -> the transports
``http`` | ``grpc`` (siblings: neither imports the other) -> ``composition`` (the one place the
parts are built and closed: ``Runtime.open``) -> ``service`` -> ``protocol`` -> ``cache`` |
``models`` | ``samples`` (independent of each other) -> the base: ``config``, ``errors``,
``metrics``, ``tensor``. The protocol sits above the models because it checks requests against
a model's configuration; the cache knows neither. Nothing does work at import: sessions and
pools are made when the runtime opens.
"""
