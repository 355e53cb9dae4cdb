"""A self-signed certificate for the testbed's HTTPS mode (``Testbed(tls=True)``).

One EC key and certificate per process, for ``*.example.test`` and the loopback range,
written to a private temporary folder (``ssl`` loads chains from files only).
Clients must not verify it (Scrapy does not by default: DOWNLOAD_VERIFY_CERTIFICATES=False).
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import shutil
import ssl
import tempfile
from pathlib import Path

_FILES: tuple[str, str] | None = None


def cert_files() -> tuple[str, str]:
    global _FILES
    if _FILES is not None:
        return _FILES
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "testbed.example.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("*.example.test"),
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="testbed-tls-"))
    atexit.register(shutil.rmtree, folder, True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    _FILES = (str(cert_path), str(key_path))
    return _FILES


def server_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*cert_files())
    return ctx
