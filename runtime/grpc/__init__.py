"""Triton's ``inference.GRPCInferenceService`` on one grpcio server (its synchronous one).

Layer rule: a thin transport beside ``http``. It parses each protobuf request once into the
same internal requests the HTTP side builds, calls the same ``service`` on the event loop
(``loop_bridge``), and encodes the results as protobuf; it holds no inference or caching logic of
its own, but for answering a repeated ``ModelInfer`` from the answer memo, the cache tier both
transports share (``cache.memo``), on the call's thread (``infer``). It never imports ``http``:
it receives the runtime from the composition root (``runtime.server`` starts it once the
runtime is open, on ``--grpc-port``). What it does below grpcio's public API is in one module,
``grpcio_seam``. Messages are the protocol's own generated code (shipped by
``tritonclient.grpc``), never hand-written.
"""
