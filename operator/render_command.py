"""`cachefleet render FILE`: print every object the operator would apply, without a cluster.

The same file renders the same output on every run, so that a rendering kept in Git (a GitOps
repository, a review of what a change does) changes only when the input or the release does.
What the operator generates in the cluster is therefore not rendered: the generated Secrets
(``<name>-redis-auth``, ``<name>-fleet``) are left out, and the digests of their keys in the pod
templates are those of a fixed placeholder (``GENERATED``). Deriving the keys from the input
instead would make them known to anyone who can read the file.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import Any, Literal

import yaml

from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import DEFAULT_OPERATOR_NAMESPACE

_log = logging.getLogger(__name__)

HELP = "print every object the operator would apply for a CachedInferenceService."
#: What stands in for each key the operator generates (a Redis password, the cache secret, the
#: admin token): their Secrets are not rendered, and the pod templates' digests of them are
#: this one's, the same on every run.
GENERATED = "generated-by-the-operator"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (redis.conf, config.yaml) as literal blocks; no anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="YAML file with one CachedInferenceService")
    parser.add_argument("--namespace", help="namespace when the file names none (default: default)")
    parser.add_argument(
        "--operator-namespace",
        default=DEFAULT_OPERATOR_NAMESPACE,
        type=_namespace,
        help="where the operator runs, admitted by managed Redis's NetworkPolicy unless the spec "
        f"names another (default: {DEFAULT_OPERATOR_NAMESPACE}, as the chart installs it)",
    )

    parser.add_argument(
        "--user-ids",
        choices=("fixed", "platform"),
        default="fixed",
        help="user ids of services whose spec sets no userIds: fixed (the images' users) or "
        "platform (left to the platform, as on OpenShift; the chart's openshift.enabled)",
    )


def _namespace(value: str) -> str:
    """A namespace name is a DNS-1123 label (Kubernetes object names documentation)."""
    if len(value) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a namespace name (a DNS-1123 label: lower-case letters, digits "
            "and '-', at most 63 characters, starting and ending with a letter or digit)"
        )
    return value


def run(args: argparse.Namespace) -> int:
    try:
        children = render_file(
            args.file,
            namespace=args.namespace,
            operator_namespace=args.operator_namespace,
            user_ids=args.user_ids,
        )
    except SpecError as error:
        print(f"cachefleet render: {args.file}: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.dump_all(children, Dumper=_Dumper, sort_keys=False))
    return 0


def render_file(
    path: Path,
    *,
    namespace: str | None = None,
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE,
    user_ids: Literal["fixed", "platform"] = "fixed",
) -> list[dict[str, Any]]:
    """The children for the object in ``path``, without the Secrets the operator generates
    (their keys' digests in the pod templates are ``GENERATED``'s: see the module docstring).

    ``operator_namespace`` is what the running operator learns from the downward API: without a
    cluster it must be told, or the NetworkPolicy would admit the operator from the wrong place.
    """
    # Imported here: the builders pull in pydantic and Jinja2, which `cachefleet --help` skips.
    from cachefleet.operator.manifests.children import (
        build_children,
        needs_generated_cache_secret,
        needs_generated_password,
    )
    from cachefleet.operator.manifests.meta import (
        Owner,
        cache_secret_name,
        redis_auth_secret_name,
    )
    from cachefleet.operator.manifests.spec import read_spec

    body = _read(path)
    if namespace and not body["metadata"].get("namespace"):
        body["metadata"]["namespace"] = namespace
    read = read_spec(body.get("spec") or {})
    if read.ignored:
        _log.warning(
            "%s: ignoring fields this release does not know (a typo, or written for a newer "
            "release?); the defaults apply in their place: %s",
            path,
            read.describe_ignored(),
        )
    spec = read.spec
    owner = Owner.from_body(body)
    children = build_children(
        spec,
        owner=owner,
        redis_password=GENERATED if needs_generated_password(spec) else None,
        cache_secret=GENERATED if needs_generated_cache_secret(spec) else None,
        operator_namespace=operator_namespace,
        admin_token=GENERATED,
        user_ids=user_ids,
    )
    generated = {redis_auth_secret_name(owner), cache_secret_name(owner)}
    left_out = [c for c in children if c["kind"] == "Secret" and c["metadata"]["name"] in generated]
    if left_out:
        _log.warning(
            "%s: not rendered: the Secrets the operator generates in the cluster (%s)",
            path,
            "; ".join(
                f"{c['metadata']['name']}, keys {', '.join(sorted(c['data']))}" for c in left_out
            ),
        )
    return [c for c in children if c not in left_out]


def _read(path: Path) -> dict[str, Any]:
    from cachefleet.operator.manifests.meta import GROUP, KIND, VERSION

    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SpecError(f"cannot read: {error}") from None
    if not isinstance(body, dict) or body.get("kind") != KIND:
        raise SpecError(f"expected one {KIND} object ({GROUP}/{VERSION})")
    if not isinstance(body.get("metadata"), dict) or not body["metadata"].get("name"):
        raise SpecError("metadata.name is required")
    if not isinstance(body.get("spec"), dict):
        raise SpecError("spec is required")
    return body
