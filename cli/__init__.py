"""The ``cachefleet`` command line: the top layer, dispatching to runtime, operator and bench."""
