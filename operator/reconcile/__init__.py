"""Reconciliation: talk to the Kubernetes API and to Redis to make the children match the spec.

Sits between the kopf handlers (above) and the pure manifest builders (below). Blocking I/O
with short timeouts: kopf runs synchronous handlers in its thread pool.
"""
