"""Source definitions (``ferret source add FILE``): a YAML or JSON file naming the corpus, the connector kind, its
config and an optional schedule, with secrets kept out of the database.

A secret is written as a reference, ``{env: NAME}`` (an environment variable) or ``{file: /run/secrets/name}`` (a
file, trailing newline stripped). The database stores the references; ``resolve_secrets`` replaces them with the
values only in memory, when the connector is built for a sync. A plain-text value under a key that looks like a
secret (``password``, ``secret``, ``token``, ``api_key``, ``*_key``...), or a URL with a password in it
(``postgresql://user:password@host/db``), is refused with the fix in the message.

Example (``wiki.yaml``)::

    corpus: intranet
    name: wiki
    kind: web
    schedule_minutes: 60
    config:
      start_urls: ["https://wiki.corp.example/"]
      allowed_hosts: ["wiki.corp.example"]
      headers:
        Authorization: {env: WIKI_AUTH_HEADER}
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferret.core.errors import InvalidInputError

_SECRET_KEY = re.compile(r"(password|passwd|secret|token|api_?key|access_?key|private_?key|credential|authorization)$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_URL_WITH_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/?#@\s]*:[^/?#@\s]+@", re.IGNORECASE)
"""``scheme://user:password@host``: a SQLAlchemy URL, a git remote or a broker URL holding its password."""


class SourceSpec(BaseModel):
    """One source as its definition file states it."""

    model_config = ConfigDict(extra="forbid")

    corpus: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=64)
    kind: str = Field(min_length=1, max_length=64)
    config: dict[str, Any] = Field(default_factory=dict)
    schedule_minutes: int | None = Field(default=None, ge=1, le=60 * 24 * 31)
    enabled: bool = True


def load_spec(path: Path) -> SourceSpec:
    """Read and validate a definition file; every problem is named in one sentence."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInputError(f"Cannot read source definition {path}: {error.strerror or error}.") from None
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise InvalidInputError(
            f"Source definition {path} is not valid {path.suffix[1:] or 'YAML'}: {error}."
        ) from None
    return parse_spec(raw, str(path))


def parse_spec(raw: Any, origin: str = "the source definition") -> SourceSpec:
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{origin} must be a mapping with corpus, name, kind and config.")
    try:
        spec = SourceSpec.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'definition'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise InvalidInputError(f"{origin} is not valid ({problems}).") from None
    if not _NAME.match(spec.name):
        raise InvalidInputError(
            f"Source name {spec.name!r} is not valid; use 1-64 lowercase letters, digits, '-' or '_' (it prefixes "
            "the source's group principals)."
        )
    check_no_plaintext_secrets(spec.config)
    return spec


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("env", "file")


def check_no_plaintext_secrets(config: Any, path: str = "config") -> None:
    """Refuse a secret-looking key whose value is a literal instead of an ``{env: ...}``/``{file: ...}`` reference,
    and a URL anywhere that holds a password."""
    if isinstance(config, dict) and not _is_reference(config):
        for key, value in config.items():
            where = f"{path}.{key}"
            if _SECRET_KEY.search(str(key).lower()) and isinstance(value, str | int) and value != "":
                raise InvalidInputError(
                    f"{where} holds a plain-text secret; write it as {{env: VARIABLE}} or {{file: /path}} so it is "
                    "never stored in the database."
                )
            check_no_plaintext_secrets(value, where)
    elif isinstance(config, list):
        for index, value in enumerate(config):
            check_no_plaintext_secrets(value, f"{path}[{index}]")
    elif isinstance(config, str) and _URL_WITH_PASSWORD.match(config):
        raise InvalidInputError(
            f"{path} is a URL with a password in it; write the whole URL as {{env: VARIABLE}} or {{file: /path}} so "
            "the password is never stored in the database."
        )


def resolve_secrets(config: Any, path: str = "config") -> Any:
    """A copy of ``config`` with every secret reference replaced by its value (in memory only)."""
    if _is_reference(config):
        kind, name = next(iter(config.items()))
        if kind == "env":
            value = os.environ.get(str(name))
            if value is None:
                raise InvalidInputError(f"{path} reads environment variable {name}, which is not set.")
            return value
        try:
            return Path(str(name)).read_text(encoding="utf-8").rstrip("\n")
        except OSError as error:
            raise InvalidInputError(f"{path} reads secret file {name}: {error.strerror or error}.") from None
    if isinstance(config, dict):
        return {key: resolve_secrets(value, f"{path}.{key}") for key, value in config.items()}
    if isinstance(config, list):
        return [resolve_secrets(value, f"{path}[{index}]") for index, value in enumerate(config)]
    return config


def secret_values(config: Any) -> dict[str, str]:
    """The value each of ``config``'s secret references resolves to now, mapped to the reference as written
    (``{env: KB_URL}``); a reference that does not resolve contributes nothing."""
    found: dict[str, str] = {}
    if _is_reference(config):
        try:
            value = resolve_secrets(config)
        except InvalidInputError:
            return {}
        if isinstance(value, str) and value:
            kind, name = next(iter(config.items()))
            found[value] = f"{{{kind}: {name}}}"
    elif isinstance(config, dict | list):
        for child in config.values() if isinstance(config, dict) else config:
            found.update(secret_values(child))
    return found


def without_secrets(sentence: str, config: Any) -> str:
    """``sentence`` with every value of ``config``'s secret references replaced by the reference itself, so an error
    can say where it went (``at {env: KB_URL}``) without the value (a URL with a password, a token)."""
    for value, reference in sorted(secret_values(config).items(), key=lambda item: -len(item[0])):
        sentence = sentence.replace(value, reference)
    return sentence
