"""The KServe v2 protocol: JSON and binary-extension bodies to and from Tensors.

Layer rule: pure functions over bytes and Tensors; may use ``models.types`` to validate requests.
"""
