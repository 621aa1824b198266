"""Objects of an S3-compatible bucket as documents (boto3 with ``endpoint_url``, path-style addressing).

Incremental by a ``LastModified`` watermark with ``overlap_seconds`` (objects written with a late timestamp are
read again; unchanged content is not re-embedded). Objects go in ``(LastModified, Key)`` order with a mark after
each, so an interrupted sync resumes after the last persisted object. The ETag is the object's version (kept in
the metadata). Deletions come from the complete key listing; a listing error deletes nothing.

Permissions: ``acl`` maps key globs to names (first match wins, none = public); an object tag (``acl_tag``, a
comma-separated value) overrides the globs. Tags change without changing ``LastModified``, so a permission pass
reads them for every object when ``acl_tag`` is set.

Errors: throttling (503 SlowDown, 429) and 5xx go through the shared retry helper; ``AccessDenied`` or a missing
key on one object skips it with the reason; on the listing they fail the sync with a sentence naming the setting to
check (credentials, bucket).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatch
from functools import partial
from pathlib import PurePosixPath
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferret.connectors.access import reason, redact_url
from ferret.connectors.filesystem.parsers import (
    SUPPORTED_EXTENSIONS,
    UnreadableFileError,
    parse_file,
    unsupported_reason,
)
from ferret.connectors.principal_map import first_match, principals_for
from ferret.connectors.retry import RetryPolicy, call_with_retry, retry_after_seconds
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import SlimConnector
from ferret.core.sources.documents import Document, SkippedItem
from ferret.core.sources.incremental import CursorMark, IncrementalConnector, PermissionPass, SyncItem

T = TypeVar("T")
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}


class S3Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bucket: str = Field(min_length=3, max_length=63)
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    prefix: str = ""
    include: list[str] = Field(default_factory=list)
    acl: dict[str, list[str]] = Field(default_factory=dict)
    acl_tag: str | None = None
    max_object_bytes: int = Field(default=50_000_000, gt=0)
    overlap_seconds: float = Field(default=300.0, ge=0)
    retry_budget_s: float = Field(default=120.0, gt=0)
    name: str | None = None


class S3Connector(IncrementalConnector, SlimConnector, PermissionPass):
    """Example:
    >>> connector = S3Connector(bucket="docs", endpoint_url="http://minio:9000", access_key_id="...",
    ...                         secret_access_key="...", acl={"hr/*": ["hr"]}, acl_tag="ferret-groups")
    """

    kind = "s3"

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        try:
            self.settings = S3Config(**config)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in error.errors())
            raise InvalidInputError(f"Invalid s3 connector config ({problems}).") from None
        import boto3
        from botocore.config import Config

        s = self.settings
        self.client = boto3.client(
            "s3",
            endpoint_url=s.endpoint_url,
            region_name=s.region,
            aws_access_key_id=s.access_key_id,
            aws_secret_access_key=s.secret_access_key,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"total_max_attempts": 1},  # one retry policy for all sources: ferret.connectors.retry
                connect_timeout=10,
                read_timeout=60,
            ),
        )
        self.policy = RetryPolicy(budget_s=s.retry_budget_s)

    def close(self) -> None:
        self.client.close()

    def check_access(self) -> None:
        """One listing of at most one key under ``prefix`` (credentials, bucket, List), then a HEAD of that key (Read);
        no retries: an unreachable endpoint is said at once."""
        from botocore.exceptions import BotoCoreError, ClientError

        s, where = self.settings, redact_url(self.settings.endpoint_url or "AWS")
        key = None
        try:
            page = self.client.list_objects_v2(Bucket=s.bucket, Prefix=s.prefix, MaxKeys=1)
            key = next((item["Key"] for item in page.get("Contents", [])), None)
            if key is not None:
                self.client.head_object(Bucket=s.bucket, Key=key)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", "")) or "error"
            if key is not None:
                raise InvalidInputError(
                    f"S3 at {where} lists bucket {s.bucket!r} but refused reading its object {key!r} ({code}); the "
                    "key needs Read on the bucket as well as List."
                ) from None
            sentence = _LISTING_REFUSALS.get(code, _LISTING_REFUSED)
            raise InvalidInputError(sentence.format(bucket=s.bucket, where=where, code=code)) from None
        except BotoCoreError as error:
            raise InvalidInputError(
                f"S3 at {where} could not be reached to list bucket {s.bucket!r} ({reason(error)}); check "
                "endpoint_url and region, and that the server is up."
            ) from None

    def _call(self, call: Callable[[], T]) -> T:
        return call_with_retry(call, _transient, self.policy)

    def _objects(self) -> list[dict[str, Any]]:
        """Every included object of the bucket (under ``prefix``); a failed page raises, so a listing is complete."""
        objects: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            arguments: dict[str, Any] = {"Bucket": self.settings.bucket, "Prefix": self.settings.prefix}
            if token:
                arguments["ContinuationToken"] = token
            response = self._list_page(arguments)
            page: dict[str, Any] = dict(response)
            objects.extend(item for item in page.get("Contents", []) if self._included(item["Key"]))
            if not page.get("IsTruncated"):
                return objects
            token = page["NextContinuationToken"]

    def _list_page(self, arguments: dict[str, Any]) -> Any:
        """One page of the listing; a refusal is a sentence naming the setting to check, not botocore's text."""
        from botocore.exceptions import ClientError

        try:
            return self._call(partial(self.client.list_objects_v2, **arguments))
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            sentence = _LISTING_REFUSALS.get(code)
            if sentence is None:
                raise
            where = self.settings.endpoint_url or "AWS"
            raise InvalidInputError(sentence.format(bucket=self.settings.bucket, where=where, code=code)) from error

    def _included(self, key: str) -> bool:
        if key.endswith("/"):
            return False
        return not self.settings.include or any(fnmatch(key, pattern) for pattern in self.settings.include)

    def sync(self, cursor: Any | None) -> Iterator[SyncItem]:
        objects = sorted(self._objects(), key=lambda item: (item["LastModified"], item["Key"]))
        since: datetime | None = None
        if cursor is not None:
            since = datetime.fromisoformat(cursor["watermark"]) - timedelta(seconds=self.settings.overlap_seconds)
        for item in objects:
            modified = _utc(item["LastModified"])
            if since is not None and modified < since:
                continue
            yield self._document(item)
            yield CursorMark(cursor={"watermark": modified.isoformat()})

    def _document(self, item: dict[str, Any]) -> Document | SkippedItem:
        key, size = item["Key"], int(item.get("Size", 0))
        extension = PurePosixPath(key).suffix.lower()
        if extension not in SUPPORTED_EXTENSIONS:
            return SkippedItem(external_id=key, reason=unsupported_reason(extension))
        if size > self.settings.max_object_bytes:
            return SkippedItem(
                external_id=key,
                reason=f"object is {size:,} bytes, over max_object_bytes {self.settings.max_object_bytes:,}",
            )
        from botocore.exceptions import ClientError

        try:
            body = self._call(lambda: self.client.get_object(Bucket=self.settings.bucket, Key=key))
            data = body["Body"].read()
            principals = self._principals(key)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("AccessDenied", "NoSuchKey", "403", "404"):
                return SkippedItem(external_id=key, reason=f"cannot read object: {code}")
            raise
        try:
            parsed = parse_file(data, extension)
        except UnreadableFileError as error:
            return SkippedItem(external_id=key, reason=str(error))
        return Document(
            external_id=key,
            title=parsed.title or PurePosixPath(key).stem,
            text=parsed.text,
            source=self.source_name,
            metadata={"key": key, "etag": str(item.get("ETag", "")).strip('"'), "size": size},
            acl_groups=principals,
            updated_at=_utc(item["LastModified"]),
        )

    def _principals(self, key: str) -> list[str]:
        if self.settings.acl_tag:
            tags = self._call(lambda: self.client.get_object_tagging(Bucket=self.settings.bucket, Key=key))
            for tag in tags.get("TagSet", []):
                if tag.get("Key") == self.settings.acl_tag:
                    return principals_for(self.source_name, str(tag.get("Value", "")).replace("+", ",").split(","))
        return first_match(self.source_name, key, self.settings.acl)

    def list_external_ids(self) -> Iterator[str]:
        yield from sorted(item["Key"] for item in self._objects())

    def iter_permissions(self) -> Iterator[tuple[str, list[str]]]:
        for key in self.list_external_ids():
            yield key, self._principals(key)


_CREDENTIALS_REFUSED = "S3 at {where} refused the credentials ({code}); check access_key_id and secret_access_key."
_LISTING_REFUSALS = {
    "InvalidAccessKeyId": _CREDENTIALS_REFUSED,
    "SignatureDoesNotMatch": _CREDENTIALS_REFUSED,
    "AccessDenied": "S3 at {where} denied listing bucket {bucket!r} ({code}); the key needs List and Read on it, or "
    "the bucket does not exist.",
    "NoSuchBucket": "Bucket {bucket!r} does not exist on S3 at {where} ({code}); check bucket and endpoint_url.",
}
"""Listing errors an admin causes and fixes in the source's config, as the sentence that says which setting."""
_LISTING_REFUSED = (
    "S3 at {where} refused listing bucket {bucket!r} ({code}); check bucket, prefix and the key's rights."
)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _transient(error: Exception) -> float | bool | None:
    """Throttling and server errors are worth a retry (boto3's own retries are off); anything else is not."""
    from botocore.exceptions import ClientError, ConnectionError, EndpointConnectionError, ReadTimeoutError

    if isinstance(error, EndpointConnectionError | ConnectionError | ReadTimeoutError):
        return True
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        metadata = error.response.get("ResponseMetadata", {})
        status = int(metadata.get("HTTPStatusCode", 0) or 0)
        if code in _THROTTLED or status in (429, 500, 502, 503, 504):
            asked = retry_after_seconds(metadata.get("HTTPHeaders", {}).get("retry-after"))
            return asked if asked is not None else True
        return None
    return None
