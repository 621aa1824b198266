"""The s3 connector's own sentences against a real SeaweedFS (``weed mini``): what an admin's mistake in the
source's config looks like (the contract suite covers syncing itself)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connectors.contract.drivers.s3 import serve
from connectors.servers.seaweed import ADMIN, READER, SeaweedServer
from ferret.connectors.s3.connector import S3Connector
from ferret.core.errors import InvalidInputError


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    with serve(tmp_path_factory.mktemp("s3")) as server:
        server.client().create_bucket(Bucket="docs")
        yield server


def listing(server: SeaweedServer, bucket: str, key: tuple[str, str]) -> list[str]:
    connector = S3Connector(
        name="bucket",
        bucket=bucket,
        endpoint_url=server.endpoint,
        access_key_id=key[0],
        secret_access_key=key[1],
        retry_budget_s=2,
    )
    try:
        return list(connector.list_external_ids())
    finally:
        connector.close()


def test_a_wrong_secret_a_missing_bucket_and_a_denied_bucket_are_sentences_naming_the_setting(
    seaweed: SeaweedServer,
) -> None:
    assert listing(seaweed, "docs", ADMIN) == []
    with pytest.raises(InvalidInputError, match=r"refused the credentials \(SignatureDoesNotMatch\); check access_key"):
        listing(seaweed, "docs", (ADMIN[0], "wrong"))
    with pytest.raises(InvalidInputError, match=r"refused the credentials \(InvalidAccessKeyId\)"):
        listing(seaweed, "docs", ("nobody", "wrong"))
    with pytest.raises(InvalidInputError, match=r"^Bucket 'nosuch' does not exist on S3 at http://127.0.0.1:\d+ \("):
        listing(seaweed, "nosuch", ADMIN)
    with pytest.raises(InvalidInputError, match=r"denied listing bucket 'other' \(AccessDenied\); the key needs List"):
        listing(seaweed, "other", READER)
