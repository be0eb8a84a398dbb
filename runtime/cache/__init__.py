"""The response cache: keys, entries, tiers (local, Redis), coalescing and write-behind.

Layer rule: imports only ``cachefleet.runtime.{tensor,errors,config,metrics}`` and itself;
knows nothing of HTTP or of ONNX Runtime.
"""
