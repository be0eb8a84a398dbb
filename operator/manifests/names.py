"""Which CachedInferenceService names make valid children, and why the others do not.

The children's names are derived from the service's name, and the API server checks each of them
against its own rules (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/):

- Services are DNS-1035 labels: at most 63 characters, lowercase letters, digits and '-',
  starting with a letter and ending with a letter or digit. The runtime Service is named after
  the service itself and Redis adds ``<name>-redis-headless``.
- A label value is at most 63 characters, and the StatefulSet controller labels every Redis pod
  with ``controller-revision-hash: <name>-redis-<hash of up to 10 characters>``.
- ``foo-redis`` (or ``foo-redis-headless``) would get children whose names ``foo``'s Redis
  already uses in the same namespace.

A name that breaks one of these can never be reconciled, so it stalls with this message instead
of failing every apply with the server's 422.
"""

from __future__ import annotations

import re

from cachefleet.operator.manifests.errors import SpecError

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE_MAX = 63
# ``<name>-redis`` plus ``-`` and the controller's revision hash (up to 10 characters) must fit
# in a label value: 63 - len("-redis") - 1 - 10.
MAX_NAME_LENGTH = LABEL_VALUE_MAX - len("-redis") - 1 - 10
RESERVED_SUFFIXES = ("-redis", "-redis-headless")


def check_name(name: str) -> None:
    """Raise SpecError naming ``metadata.name`` when the children could not be created."""
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(
            f"metadata.name {name!r} is {len(name)} characters long; at most {MAX_NAME_LENGTH} "
            f"fit (the Redis pods' controller-revision-hash label adds 17 characters and a "
            f"label value holds 63): create the service under a shorter name"
        )
    if DNS_1035_LABEL.fullmatch(name) is None:
        raise SpecError(
            f"metadata.name {name!r} cannot name a Service: use lowercase letters, digits and "
            f"'-', starting with a letter and ending with a letter or digit (no dots)"
        )
    for suffix in RESERVED_SUFFIXES:
        if name.endswith(suffix):
            raise SpecError(
                f"metadata.name {name!r} ends with {suffix!r}: its children would take the names "
                f"of the Redis children of {name.removesuffix(suffix)!r} in the same namespace; "
                f"choose another name"
            )
