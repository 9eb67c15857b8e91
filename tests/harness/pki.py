"""The control plane's certificates, made fresh for every run with the ``cryptography`` package: a CA, the API
server's serving certificate, the admin's client certificate (``system:masters``), the webhooks' serving
certificate and the service-account signing key; and the pair Kueue insists on reading from a fixed path."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
from pathlib import Path
from typing import Any

from tests.harness.processes import ControlPlaneError


def make_pki(d: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=2)

    def key_pem(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    def write(name: str, data: bytes) -> None:
        (d / name).write_bytes(data)
        os.chmod(d / name, 0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gangrun-e2e-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write("ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    write("ca.key", key_pem(ca_key))

    def leaf(name: str, cn: str, orgs: list[str], server: bool, client: bool) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes"),
                        x509.DNSName("kubernetes.default"),
                        x509.DNSName("kubernetes.default.svc"),
                    ]
                ),
                critical=False,
            )
        cert = b.sign(ca_key, hashes.SHA256())
        write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM))
        write(f"{name}.key", key_pem(key))

    leaf("apiserver", "kube-apiserver", [], server=True, client=False)
    leaf("admin", "admin", ["system:masters"], server=False, client=True)
    leaf("webhook", "webhook", [], server=True, client=False)

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write("sa.key", key_pem(sa))
    write(
        "sa.pub",
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def ensure_kueue_metrics_certs(pki: Path) -> None:
    """Kueue reads /etc/kueue/metrics/certs/tls.{crt,key} when its internal cert manager is off.

    The metrics server itself is disabled (bindAddress "0"), so any valid pair does; an existing
    pair (e.g. another test run's) is kept.
    """
    target = Path("/etc/kueue/metrics/certs")
    if (target / "tls.crt").exists() and (target / "tls.key").exists():
        return
    try:
        target.mkdir(parents=True, exist_ok=True)
        for src, dst in (("webhook.crt", "tls.crt"), ("webhook.key", "tls.key")):
            tmp = target / f".{dst}.{os.getpid()}"
            shutil.copy(pki / src, tmp)
            os.replace(tmp, target / dst)
    except PermissionError as e:
        raise ControlPlaneError(
            f"Kueue needs a certificate pair in {target} (a hard-coded path); could not write it: {e}. "
            "Run as root or create it once with any valid certificate and key."
        ) from e
