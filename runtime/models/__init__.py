"""Models: the Triton-layout repository, config.pbtxt, and the ONNX Runtime backend.

Layer rule: imports only ``cachefleet.runtime.{tensor,errors,config}``; knows nothing of HTTP
or of the cache.

- ``types``: what other layers may know (TensorSpec, ModelConfig, Model, ModelRepository).
- ``repository``: ``load_repository(path, settings)``, the entry point; load-time only.
- ``config_message``: Triton's own ModelConfig message (tritonclient's generated code).
- ``config``: parse config.pbtxt, fill Triton's defaults, map to ModelConfig and its JSON.
- ``graph``: check a config against the ONNX graph, or derive one from it.
- ``versions``: version folders and version policies.
- ``providers``: execution providers and thread counts per model.
- ``onnx_backend``: the InferenceSession adapter (Tensors in, Tensors out).
"""
