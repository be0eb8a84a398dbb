"""The inference server: KServe v2 / Triton HTTP protocol over ONNX Runtime, with a response cache.

Layers, highest first, each importing only those below it (checked by import-linter, see
``pyproject.toml``): the commands (``serve_command``, ``flush_command``, ``samples_command``) ->
``http`` -> ``service`` -> ``protocol`` -> ``cache`` | ``models`` | ``samples`` (independent of
each other) -> the base: ``config``, ``errors``, ``metrics``, ``tensor``. The protocol sits above
the models because it checks requests against a model's configuration; the cache knows neither.
Nothing does work at import: sessions and pools are made in the app's lifespan.
"""
