"""Certificate authority and leaf certificates made with `cryptography`.

Kopf's own self-signed generator depends on oscrypto, which cannot detect OpenSSL 3.0.x on
this platform, so webhook serving certificates and the local control plane's PKI come from
here. Keys are ECDSA P-256: small, fast to generate and accepted by Go's TLS stack.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             not_after: dt.datetime | None = None) -> x509.CertificateBuilder:
    """Valid from five minutes ago for _VALIDITY, or until ``not_after`` if that is sooner."""
    now = dt.datetime.now(dt.UTC)
    end = now + _VALIDITY if not_after is None else min(now + _VALIDITY, not_after)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(end)
    )


def _spki(key: ec.EllipticCurvePublicKey | x509.Certificate) -> bytes:
    public = key.public_key() if isinstance(key, x509.Certificate) else key
    return public.public_bytes(serialization.Encoding.DER,
                               serialization.PublicFormat.SubjectPublicKeyInfo)


def pair_matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    """Whether ``key_pem`` (unencrypted) is the private key of ``cert``."""
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return isinstance(key, ec.EllipticCurvePrivateKey) and _spki(key.public_key()) == _spki(cert)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates; what it issues never
    outlives it."""

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """A stored CA (the webhook's bootstrap keeps one per Secret); ValueError unless the
        certificate is a CA's and the key (ECDSA, unencrypted) is its own."""
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not pair_matches(cert, key_pem):
            raise ValueError("the key is not the certificate's")
        try:
            constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
        except x509.ExtensionNotFound as exc:
            raise ValueError("not a CA certificate") from exc
        if not constraints.value.ca:
            raise ValueError("not a CA certificate")
        authority = cls.__new__(cls)
        authority._key, authority._cert, authority._name = key, cert, cert.subject
        return authority

    def __init__(self, common_name: str = "fgentic-governance-ca") -> None:
        self._key = _new_key()
        name = _name(common_name)
        self._name = name
        self._cert = (
            _builder(name, name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def certificate(self) -> x509.Certificate:
        return self._cert

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def signed(self, cert: x509.Certificate) -> bool:
        """Whether ``cert`` was issued by this CA (its signature verifies with our key)."""
        try:
            cert.verify_directly_issued_by(self._cert)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True

    @property
    def keypair(self) -> KeyPair:
        return KeyPair(self.cert_pem, _key_pem(self._key))

    def issue_server(self, hosts: list[str]) -> KeyPair:
        """A serving certificate valid for DNS names and IP addresses in ``hosts``."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(_name(hosts[0]), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def issue_client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate; Kubernetes reads CN as the user and O as groups."""
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(
        self, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> KeyPair:
        key = _new_key()
        builder = (
            _builder(subject, self._name, key.public_key(), self._cert.not_valid_after_utc)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_serving_bundle(directory: Path, hosts: list[str]) -> tuple[Path, Path, Path]:
    """Create a CA and a serving certificate in ``directory``; return (cert, key, ca) paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority()
    leaf = ca.issue_server(hosts)
    cert, key, ca_path = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    leaf.write(cert, key)
    ca_path.write_bytes(ca.cert_pem)
    return cert, key, ca_path
