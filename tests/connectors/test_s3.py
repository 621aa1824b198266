"""The s3 connector's own sentences against a real SeaweedFS (``weed mini``): what an admin's mistake in the
source's config looks like, when syncing and when ``source add`` checks it (the contract suite covers syncing)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from connectors.contract.drivers.s3 import serve
from connectors.servers.seaweed import ADMIN, READER, SeaweedServer
from connectors.source_add import added, refused
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


def s3_source(server: SeaweedServer, bucket: str, key_id: str) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "endpoint_url": server.endpoint,
        "access_key_id": key_id,
        "secret_access_key": {"env": "S3_SECRET"},
        "prefix": "docs/",
    }


def test_source_add_checks_the_bucket_and_key_before_storing(
    seaweed: SeaweedServer, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.client().put_object(Bucket="docs", Key="docs/a.md", Body=b"# A\n")  # the check HEADs the first key
    monkeypatch.setenv("S3_SECRET", READER[1])
    assert added(session, "s3", s3_source(seaweed, "docs", READER[0])).config["secret_access_key"] == {
        "env": "S3_SECRET"
    }


def test_source_add_refuses_a_missing_bucket_a_wrong_secret_and_a_denied_bucket(
    seaweed: SeaweedServer, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_SECRET", ADMIN[1])
    refused(
        session,
        "s3",
        s3_source(seaweed, "nosuch", ADMIN[0]),
        r"^Bucket 'nosuch' does not exist on S3 at http://127\.0\.0\.1:\d+ \(NoSuchBucket\); check bucket and "
        r"endpoint_url; nothing was stored",
    )
    monkeypatch.setenv("S3_SECRET", READER[1])  # a key that may read bucket docs only
    refused(session, "s3", s3_source(seaweed, "other", READER[0]), r"denied listing bucket 'other' \(AccessDenied\)")
    monkeypatch.setenv("S3_SECRET", "not-the-reader-secret")
    message = refused(
        session, "s3", s3_source(seaweed, "docs", READER[0]), r"refused the credentials \(SignatureDoesNotMatch\)"
    )
    assert "not-the-reader-secret" not in message
