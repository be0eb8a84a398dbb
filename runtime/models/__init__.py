"""Models: the Triton-layout repository, config.pbtxt, and the ONNX Runtime backend.

Layer rule: imports only ``cachefleet.runtime.{tensor,errors,config}``; knows nothing of HTTP
or of the cache.
"""
