"""Certificates made in the test with ``cryptography``: a CA, and leaves it signs.

EC P-256 keys, valid for two days, a server leaf for 127.0.0.1 and localhost, a client leaf
with the client-auth usage. Every file is PEM, as Triton's flags and tritonclient take them.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    cert: Path
    key: Path
    _certificate: x509.Certificate
    _private_key: ec.EllipticCurvePrivateKey

    def issue(
        self, folder: Path, name: str, *, client: bool = False, organization: str | None = None
    ) -> Issued:
        """A leaf signed by this CA: a server certificate for 127.0.0.1, or a client one
        (``organization`` is its O, a Kubernetes API server's group for the user ``name``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = _builder(name, key, issuer=self._certificate.subject, organization=organization)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if not client:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        certificate = builder.sign(self._private_key, hashes.SHA256())
        return Issued(*_write(folder, name, certificate, key))


def make_authority(folder: Path, name: str) -> Authority:
    """A self-signed CA named ``name``, written to ``folder/name.crt`` and ``.key``."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(name, key, issuer=None).add_extension(
        x509.BasicConstraints(ca=True, path_length=0), critical=True
    )
    certificate = builder.sign(key, hashes.SHA256())
    cert, key_path = _write(folder, name, certificate, key)
    return Authority(cert, key_path, certificate, key)


def _builder(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    *,
    issuer: x509.Name | None,
    organization: str | None = None,
) -> x509.CertificateBuilder:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def _write(
    folder: Path, name: str, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
