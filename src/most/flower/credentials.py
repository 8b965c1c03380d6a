"""Credentials for a Flower deployment with TLS and SuperNode authentication.

* :func:`make_certificates` -- a certificate authority and a server certificate for the
  SuperLink's host names / IPs (``ca.crt``, ``server.pem``, ``server.key``);
* :func:`make_node_keys` -- one SuperNode's key pair (what ``ssh-keygen -t ecdsa -b 384``
  makes): its private key stays on the SuperNode, its public key is registered with the
  SuperLink (``flwr supernode register KEY.pub``).

Also on the command line: ``most flower credentials DIR --host HOST --nodes N``. Pure Python
(the ``cryptography`` package, which Flower depends on), no ``openssl`` binary.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = ["Certificates", "NodeKeys", "make_certificates", "make_node_keys"]



class Certificates(NamedTuple):
    """PEM files of a test CA and of a server certificate signed by it."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_certificates(
    directory: str | os.PathLike[str],
    hosts: Sequence[str] = ("127.0.0.1", "localhost", "::1"),
    *,
    valid_days: int = 365,
) -> Certificates:
    """Generate a CA and a server certificate for ``hosts`` (IPs or DNS names), valid for
    ``valid_days``. The CA's private key is not kept: make new credentials to add a host.

    Pure Python (``cryptography``), no ``openssl`` binary. The files are ``ca.crt``,
    ``server.pem`` and ``server.key`` (unencrypted PKCS#8) in ``directory``. The SuperLink
    takes all three (``--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile``); clients (SuperNodes,
    the ``flwr`` CLI, the SuperExec/ServerApp) need only ``ca.crt``.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    hosts = [str(h) for h in hosts]
    if not hosts or not all(hosts):
        raise ValueError(f"`hosts` must name at least one IP or DNS name the clients use for the SuperLink; "
                         f"got {hosts!r}.")
    for host in hosts:
        check_host(host)
    if valid_days < 1:
        raise ValueError(f"`valid_days` must be at least 1; got {valid_days}.")
    now = datetime.datetime.now(datetime.timezone.utc)
    # a certificate's dates end at 9999-12-31 (X.509's and Python's last year); checked before any file
    longest = (datetime.datetime(9999, 12, 31, tzinfo=datetime.timezone.utc) - now).days
    if valid_days > longest:
        raise ValueError(f"`valid_days` must be at most {longest} (certificates end by 9999-12-31); got {valid_days}.")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_certificate(ca_key, validity)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _server_certificate(hosts, server_key, ca_key, validity)

    paths = Certificates(out / "ca.crt", out / "server.pem", out / "server.key")
    paths.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    paths.server_key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths.server_key.chmod(0o600)
    return paths


def _ca_name():
    """The CA's name: its subject, and the server certificate's issuer."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "most Flower CA")])


def _builder(subject, issuer, public_key, validity, *, ca: bool, usage: dict):
    """A certificate builder with the fields both certificates have: names, key, serial number,
    validity, basic constraints and key usage (``usage``: the key-usage flags that are set)."""
    from cryptography import x509

    flags = dict.fromkeys(("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                           "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only"), False)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(x509.KeyUsage(**{**flags, **usage}), critical=True)
    )


def _ca_certificate(ca_key, validity):
    """The self-signed CA certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    return (
        _builder(_ca_name(), _ca_name(), ca_key.public_key(), validity, ca=True,
                 usage=dict(digital_signature=True, key_cert_sign=True, crl_sign=True))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


#: one label of a DNS name: letters, digits and inner hyphens, at most 63 characters (RFC 1123)
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_host(host: str) -> str:
    """``host`` if it is what a certificate can name for clients to match: an IP address (v4 or
    v6) or a DNS name; otherwise a ``ValueError`` that says what is wrong and the fix (a port, a
    URL's scheme or path, an address out of range)."""
    fix = "give the SuperLink's IP address or DNS name alone, e.g. 10.0.0.5 or superlink.lab"
    if "://" in host or "/" in host:
        raise ValueError(f"{host!r} is a URL or a path, not a host; {fix} (no scheme, no path).")
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if host.count(":") == 1 and host.rsplit(":", 1)[1].isdigit():
        raise ValueError(f"{host!r} holds a port; {fix} (the port goes in the SuperLink's address, not in its "
                         "certificate).")
    if all(part.isdigit() for part in host.split(".")):
        raise ValueError(f"{host!r} is not a valid IP address (each of the four numbers is 0-255); {fix}.")
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"{host!r} is neither an IP address nor a DNS name (letters, digits and hyphens in "
                         f"dot-separated labels); {fix}.")
    return host


def _server_certificate(hosts: list[str], server_key, ca_key, validity):
    """The server certificate for ``hosts`` (IP addresses or DNS names), signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    return (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]), _ca_name(),
                 server_key.public_key(), validity, ca=False, usage=dict(digital_signature=True, key_agreement=True))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


class NodeKeys(NamedTuple):
    """OpenSSH-format key pair of one SuperNode."""

    private_key: Path
    public_key: Path


def make_node_keys(directory: str | os.PathLike[str], k: int) -> NodeKeys:
    """Generate SuperNode ``k``'s EC P-384 key pair in the format Flower expects.

    Equivalent to ``ssh-keygen -t ecdsa -b 384 -N "" -f supernode_k``: the private key in
    OpenSSH format (read by ``flower-supernode --auth-supernode-private-key`` through
    ``load_ssh_private_key``) and the public key as one ``ecdsa-sha2-nistp384 ...`` line
    (read by ``flwr supernode register`` through ``load_ssh_public_key``).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    paths = NodeKeys(out / f"supernode_{k}", out / f"supernode_{k}.pub")
    paths.private_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    paths.private_key.chmod(0o600)
    paths.public_key.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + f" supernode_{k}\n".encode()
    )
    return paths
