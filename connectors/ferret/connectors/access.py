"""Helpers of the connectors' ``check_access`` sentences: URLs without their password, an error's first line.

A check's sentence names where it went (a host, a URL) but never a secret: ``redact_url`` hides the password of
every ``scheme://user:password@host`` in a text (a git remote, a SQLAlchemy URL), and ``reason`` keeps only the
first line of a library's error (drivers put the query or more context on the next lines).

Example:
    >>> redact_url("https://ann:s3cret@git.corp/handbook.git")
    'https://ann:***@git.corp/handbook.git'
    >>> reason(OSError("connection refused\\nwhile connecting to host"))
    'connection refused'
"""

from __future__ import annotations

import re

_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^/?#@:\s]*):[^/?#@\s]*@", re.IGNORECASE)
_MAX_REASON_CHARS = 200


def redact_url(text: str) -> str:
    """``text`` with the password of every URL's user info replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\1:***@", text)


def reason(error: BaseException) -> str:
    """The first line of ``error``'s message (its class name when it has none), without a trailing period."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = redact_url(lines[0] if lines else type(error).__name__)
    return text[:_MAX_REASON_CHARS].rstrip(".")
