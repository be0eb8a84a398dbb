"""The init container that downloads ``spec.model.storageUri`` (s3://, gs://, https://) into the
model emptyDir, and the read-only volume of the Secret it reads credentials from.

It runs ``cachefleet fetch-model`` from the runtime image itself (the server's image, pull
policy and security context; the copy's resources), so no other image is trusted or pulled.
The Secret is mounted as files into this container only: no secret value is in the pod template,
the environment or a ConfigMap, and the server never sees it. A failure ends the container with
one line naming the URI and the reason (past ``spec.model.storageSizeLimit`` too), written to
its termination message, which ``kubectl describe pod`` shows and the operator copies into the
service's status.

The size limit reaches the command as ``CACHEFLEET_MAX_BYTES`` (its ``--max-bytes``), not as an
argument: a service pinned to an older runtime image, whose ``fetch-model`` has no such option,
ignores the variable and still starts, where an unknown argument would stop it.

A tar the URI names is unpacked as it streams, so the model volume only ever holds the tree. A zip
must be whole before it can be read (its directory is at its end): for a URI naming a ``.zip``
the container gets a scratch emptyDir of its own, as large as the model volume, told to the
command as ``CACHEFLEET_SCRATCH_DIR`` (the same way, for the same reason), where the zip waits
while it is unpacked; the pod's ``ephemeral-storage`` request counts both volumes.
"""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests.security import container_security
from cachefleet.operator.manifests.spec import ServiceSpec

CONTAINER = "fetch-model"
#: Where an init container sees the model emptyDir (never the server's /models).
REPOSITORY_MOUNT = "/cachefleet-model-repository"
CREDENTIALS_VOLUME = "model-storage-credentials"
CREDENTIALS_DIR = "/var/run/secrets/cachefleet/model-storage"
TERMINATION_LOG = "/dev/termination-log"
#: fetch-model's ``--max-bytes`` read from the environment (see the module's docstring).
MAX_BYTES_VARIABLE = "CACHEFLEET_MAX_BYTES"
#: The zip's own emptyDir (only for a URI naming a .zip), where the fetch sees it, and the
#: variable that tells fetch-model (its ``--scratch-dir``).
SCRATCH_VOLUME = "model-scratch"
SCRATCH_MOUNT = "/cachefleet-model-scratch"
SCRATCH_VARIABLE = "CACHEFLEET_SCRATCH_DIR"


def needs_scratch(spec: ServiceSpec) -> bool:
    """Whether the URI names a zip, which is downloaded whole before it is unpacked."""
    uri = spec.model.download
    return uri is not None and uri.path.lower().endswith(".zip")


def fetch_container(spec: ServiceSpec, image: str, resources: dict[str, Any]) -> dict[str, Any]:
    """The ``fetch-model`` init container; ``image`` is the server's, ``resources`` the copy's."""
    uri = spec.model.download
    assert uri is not None
    command = [
        "cachefleet",
        "fetch-model",
        uri.text,
        REPOSITORY_MOUNT,
        "--model-name",
        spec.model.name,
        "--termination-message-file",
        TERMINATION_LOG,
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "models", "mountPath": REPOSITORY_MOUNT},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if spec.model.storage_secret_name is not None:
        command += ["--secret-dir", CREDENTIALS_DIR]
        mounts.append({"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_DIR, "readOnly": True})
    # The volume's own limit: the fetch stops there, with a message, before an eviction.
    env = [{"name": MAX_BYTES_VARIABLE, "value": str(spec.model.storage_size_limit)}]
    if needs_scratch(spec):
        mounts.append({"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT})
        env.append({"name": SCRATCH_VARIABLE, "value": SCRATCH_MOUNT})
    return {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": command,
        "env": env,
        "resources": resources,
        "securityContext": container_security(),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }


def credential_volumes(spec: ServiceSpec) -> list[dict[str, Any]]:
    """The Secret of ``storageSecretName``, readable by the pod's group only; none without it."""
    name = spec.model.storage_secret_name
    if spec.model.download is None or name is None:
        return []
    return [{"name": CREDENTIALS_VOLUME, "secret": {"secretName": name, "defaultMode": 0o440}}]


def scratch_volumes(spec: ServiceSpec) -> list[dict[str, Any]]:
    """The zip's scratch emptyDir, sized as the model volume (the zip is bounded as the tree
    is); none unless the URI names a zip."""
    if not needs_scratch(spec):
        return []
    return [{"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": str(spec.model.storage_size_limit)}}]
