"""The inference server: KServe v2 / Triton HTTP protocol over ONNX Runtime, with a response cache.

Layers, checked by import-linter: ``http`` -> ``service`` -> (``cache`` | ``models``) ->
(``protocol``, ``tensor``, ``errors``, ``metrics``, ``config``). Nothing does work at import:
sessions and pools are made in the app's lifespan.
"""
