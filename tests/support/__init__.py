"""Helpers shared by test modules: real processes, request builders, cache test doubles.

Test modules import from here (``from support.processes import ServerProcess``), never from
``conftest`` or from one another: conftest only declares fixtures, and a test module is free to
change without breaking another.
"""
