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
    return {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": command,
        # The volume's own limit: the fetch stops there, with a message, before an eviction.
        "env": [{"name": MAX_BYTES_VARIABLE, "value": str(spec.model.storage_size_limit)}],
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
