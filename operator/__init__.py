"""The operator: reconciles CachedInferenceService objects into Redis and a runtime fleet.

Layers, checked by import-linter: ``handlers`` -> ``reconcile`` -> ``manifests`` (pure: spec in,
dicts out, no I/O). From the runtime it imports the config model only.
"""
