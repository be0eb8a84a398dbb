"""Triton's ``inference.GRPCInferenceService`` over grpcio's asyncio server.

Layer rule: a thin transport beside ``http``. It decodes protobuf messages into the same
internal requests the HTTP side builds, calls the same ``service`` functions, and encodes their
results as protobuf; it holds no inference or caching logic of its own. It never imports
``http``: it receives the runtime from the composition root (``runtime.server`` starts it once
the runtime is open, in the same event loop as HTTP, on ``--grpc-port``).
Messages are the protocol's own generated code (shipped by ``tritonclient.grpc``), never
hand-written.
"""
