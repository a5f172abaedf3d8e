"""Certificates of the embedded servers that speak TLS (the broker's SASL_SSL listener, the
SQL server beyond loopback): a key and a self-signed certificate made by `keytool` at a
server's first start, never a file of the repository."""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lakehouse.core.errors import LakehouseError, explain

TRUSTSTORE_PASSWORD = "lakehouse-ca"
"""The password of a truststore, which holds only a public certificate: it guards nothing,
and JDBC clients that read a truststore need one (beeline's `trustStorePassword`)."""


@dataclass(frozen=True)
class SelfSigned:
    """A server's keystore and what clients trust it by, in one folder only its user reads."""

    folder: Path

    @property
    def keystore(self) -> Path:
        """PKCS12: the key and its certificate."""
        return self.folder / "server.p12"

    @property
    def ca_file(self) -> Path:
        """The certificate as PEM, for clients that take a CA file (librdkafka, Java's PEM)."""
        return self.folder / "ca.pem"

    @property
    def truststore(self) -> Path:
        """The certificate in a PKCS12 truststore, for JDBC clients (beeline's sslTrustStore)."""
        return self.folder / "truststore.p12"

    def password(self) -> str:
        """The keystore's password, made with it; kept in a file only this user reads."""
        return (self.folder / "keystore-password").read_text()

    def ensure(self, alias: str, host: str = "") -> SelfSigned:
        """Make the key, certificate and truststore unless they exist for the same names:
        this machine's, and `host` (the address a server listens on) when it names one."""
        names = subject_names(host)
        made_for = self.folder / "names"
        if self.truststore.exists() and made_for.exists() and made_for.read_text() == names:
            return self
        for stale in (self.keystore, self.truststore, self.ca_file):
            stale.unlink(missing_ok=True)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        secret = self.folder / "keystore-password"
        secret.touch(mode=0o600)
        secret.write_text(secrets.token_urlsafe(24))
        key = ["-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650"]
        key += ["-dname", "CN=localhost", "-ext", f"SAN={names}"]
        stored = ["-alias", alias, "-keystore", str(self.keystore), "-storetype", "PKCS12"]
        # The password by name of a variable: never an argument `ps` shows.
        stored += ["-storepass:env", "KEYSTORE_PASSWORD"]
        trusted = ["-alias", alias, "-keystore", str(self.truststore), "-storetype", "PKCS12"]
        trusted += ["-storepass", TRUSTSTORE_PASSWORD, "-noprompt"]
        for command in (
            key + stored,
            ["-exportcert", "-rfc", "-file", str(self.ca_file), *stored],
            ["-importcert", "-file", str(self.ca_file), *trusted],
        ):
            result = subprocess.run(
                ["keytool", *command],
                env={**os.environ, "KEYSTORE_PASSWORD": secret.read_text()},
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                raise LakehouseError(f"keytool failed: {explain(result.stderr)}")
        made_for.write_text(names)
        return self


def subject_names(host: str = "") -> str:
    """A certificate's subject alternative names: localhost, loopback, this machine's name,
    and the host a server listens on unless that is every interface."""
    names = ["DNS:localhost", "IP:127.0.0.1", f"DNS:{socket.gethostname()}"]
    if host and host not in ("0.0.0.0", "::", "localhost", "127.0.0.1"):
        try:
            ipaddress.ip_address(host)
            names.append(f"IP:{host}")
        except ValueError:
            names.append(f"DNS:{host}")
    return ",".join(dict.fromkeys(names))
