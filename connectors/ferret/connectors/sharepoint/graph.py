"""A small Microsoft Graph client: an msal client-credentials token and httpx requests with the shared retry policy.

The msgraph SDK cannot target another base URL and weighs ~380 MB (../shared/CONNECTORS.md), so the few endpoints
the connector needs are plain REST calls. The authority host and the Graph base URL are configurable, which is
what lets national clouds (``login.microsoftonline.us``, ``graph.microsoft.us``) and the test stub work alike.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import msal
import requests

from ferret.connectors.retry import RetryPolicy, send_with_retry
from ferret.core.errors import InvalidInputError


class GraphError(Exception):
    """A Graph answer that is neither success nor transient; ``status`` and ``code`` say which."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code


class GraphClient:
    """Authenticated GETs against one Graph base URL; ``close`` releases the connection pool."""

    def __init__(
        self,
        *,
        tenant_id: str,
        client_id: str,
        client_secret: str,
        authority_host: str,
        graph_url: str,
        scope: str,
        verify: str | bool,
        timeout_s: float,
        policy: RetryPolicy,
    ) -> None:
        self.graph_url = graph_url.rstrip("/")
        self.scope = scope
        self.policy = policy
        try:
            context = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        except OSError as error:
            raise InvalidInputError(
                f"SharePoint ca_bundle {verify} cannot be read: {error.strerror or error}."
            ) from None
        self.http = httpx.Client(verify=context, timeout=timeout_s, follow_redirects=True)
        # requests lets REQUESTS_CA_BUNDLE override a session's own ``verify``; an explicit per-request value wins
        self._session = requests.Session()
        self._session.request = functools.partial(  # type: ignore[method-assign]
            self._session.request, verify=verify, timeout=timeout_s
        )
        self._authority = f"{authority_host.rstrip('/')}/{tenant_id}"
        self._client_id, self._client_secret = client_id, client_secret
        self._app: Any = None

    def token(self) -> str:
        """An app-only access token (msal answers from its cache until the token nears expiry).

        The msal application is made on first use: it reads the authority's OpenID configuration over the network,
        which building a connector (``ferret source add`` checks the config that way) must not need.
        """
        if self._app is None:
            try:
                self._app = msal.ConfidentialClientApplication(
                    self._client_id,
                    client_credential=self._client_secret,
                    authority=self._authority,
                    http_client=self._session,
                    # a configured authority host is trusted as given: discovery would ask login.microsoftonline.com
                    instance_discovery=False,
                )
            except ValueError as error:
                raise InvalidInputError(f"SharePoint authority {self._authority} is not usable: {error}") from None
        result: dict[str, Any] = self._app.acquire_token_for_client(scopes=[self.scope])
        if "access_token" not in result:
            reason = result.get("error_description") or result.get("error") or "no access token"
            raise InvalidInputError(
                f"The identity platform refused the SharePoint app's client credentials ({reason.splitlines()[0]}); "
                "check tenant_id, client_id and client_secret."
            )
        return str(result["access_token"])

    def get(self, url: str, *, headers: dict[str, str] | None = None) -> httpx.Response:
        """``GET`` a Graph path (or an absolute next/delta link), retrying 429/5xx; other errors raise GraphError."""
        absolute = url if url.startswith(("http://", "https://")) else f"{self.graph_url}/{url.lstrip('/')}"
        request = self.http.build_request(
            "GET", absolute, headers={"Authorization": f"Bearer {self.token()}", **(headers or {})}
        )
        response = send_with_retry(self.http, request, self.policy)
        if response.status_code >= 400:
            try:
                error = response.json().get("error") or {}
            except ValueError:
                error = {}
            raise GraphError(
                response.status_code, str(error.get("code", "")), str(error.get("message", response.text[:200]))
            )
        return response

    def json(self, url: str, *, headers: dict[str, str] | None = None) -> dict[str, Any]:
        body = self.get(url, headers=headers).json()
        if not isinstance(body, dict):
            raise GraphError(200, "unexpectedBody", f"{url} answered with {type(body).__name__}, not a JSON object")
        return body

    def paged(self, url: str) -> Iterator[dict[str, Any]]:
        """Every ``value`` entry of a collection, following ``@odata.nextLink``."""
        next_url: str | None = url
        while next_url:
            body = self.json(next_url)
            yield from body.get("value", [])
            next_url = body.get("@odata.nextLink")

    def close(self) -> None:
        self.http.close()
        self._session.close()
