"""The storage credentials, read as KServe's storage initializer documents their names.

In a pod, the Secret named by ``spec.model.storageSecretName`` is mounted as a folder (one file
per key), so no secret value sits in the pod template or the environment; outside a pod the same
names are read from the environment. The keys:

- S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, and the settings
  KServe keeps in annotations, as keys here: ``AWS_ENDPOINT_URL`` (or KServe's ``S3_ENDPOINT``),
  ``AWS_DEFAULT_REGION`` (or ``AWS_REGION``), ``S3_USE_HTTPS``, ``S3_VERIFY_SSL``.
- GCS: ``gcloud-application-credentials.json`` (a service account's JSON key).
- S3 and https: ``cabundle.crt``, CA certificates to trust beside the system's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

S3_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "S3_ENDPOINT",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "S3_USE_HTTPS",
    "S3_VERIFY_SSL",
)
GCS_KEY_FILE = "gcloud-application-credentials.json"
CA_BUNDLE_FILE = "cabundle.crt"
#: Outside a pod: the environment's names for the two files.
GCS_KEY_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
CA_BUNDLE_ENV = "AWS_CA_BUNDLE"


@dataclass(frozen=True)
class Credentials:
    """What a fetch may use; ``values`` holds the S3 keys that were given."""

    values: Mapping[str, str]
    gcs_key_file: Path | None = None
    ca_bundle: Path | None = None

    def get(self, *names: str) -> str | None:
        """The first of ``names`` that was given."""
        return next((self.values[n] for n in names if self.values.get(n)), None)

    def flag(self, name: str, *, default: bool) -> bool:
        """A KServe-style switch: "0" or "false" is off, "1" or "true" on."""
        value = self.values.get(name)
        if value is None or not value.strip():
            return default
        return value.strip().lower() not in ("0", "false", "no", "off")


def read_credentials(secret_dir: Path | None, environ: Mapping[str, str]) -> Credentials:
    """From the mounted Secret's folder when there is one, else from ``environ``."""
    if secret_dir is not None:
        values = {
            key: (secret_dir / key).read_text().strip()
            for key in S3_KEYS
            if (secret_dir / key).is_file()
        }
        return Credentials(
            values=values,
            gcs_key_file=_file(secret_dir / GCS_KEY_FILE),
            ca_bundle=_file(secret_dir / CA_BUNDLE_FILE),
        )
    return Credentials(
        values={key: environ[key] for key in S3_KEYS if environ.get(key)},
        gcs_key_file=_file(Path(environ[GCS_KEY_ENV])) if environ.get(GCS_KEY_ENV) else None,
        ca_bundle=_file(Path(environ[CA_BUNDLE_ENV])) if environ.get(CA_BUNDLE_ENV) else None,
    )


def _file(path: Path) -> Path | None:
    return path if path.is_file() else None
