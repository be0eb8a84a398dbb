"""Manifest builders: a CachedInferenceService spec in, Kubernetes objects (dicts) out.

Purely data-manipulative: no I/O, no clock, no randomness, no Kubernetes client. Anything that
must come from outside (the owner's uid, the Redis password) is passed in. ``cachefleet render``
and the operator's handlers share these builders, so what ``render`` prints is what is applied.
"""
