"""The KServe objects we ship, checked against KServe's own SDK models, in the SDK's venv.

Not part of the main suite (``scripts/test`` leaves this folder out): the SDK pins protobuf
below 7 and cannot join the development install. ``bash scripts/test-kserve-venv`` builds its
venv and runs these tests; CI runs it as a step of its own.
"""
