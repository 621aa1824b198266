"""A stateful stub of the Microsoft identity platform and Graph endpoints the SharePoint connector calls.

No SharePoint or Entra ID installs here, so the connector's tests run msal and httpx against this FastAPI app,
served over HTTPS (msal accepts only https authorities) with a self-signed certificate for 127.0.0.1:

- ``GET /{tenant}/v2.0/.well-known/openid-configuration`` and ``POST /{tenant}/oauth2/v2.0/token``
  (client credentials; the Graph endpoints want the bearer token it issued);
- ``GET /v1.0/sites/{site}/drives``; ``GET /v1.0/drives/{drive}/root/delta`` with ``@odata.nextLink`` pages, a
  final ``@odata.deltaLink``, ``deleted`` facets, ``410 resyncRequired`` for a token older than ``expire_tokens``,
  and sharing changes in the delta when asked with ``Prefer: deltashowsharingchanges``;
- ``GET /v1.0/drives/{drive}/items/{item}/content`` (302 to a download URL) and ``.../permissions``
  (``grantedToV2``, ``grantedToIdentitiesV2``, sharing links, ``inheritedFrom``);
- ``GET /v1.0/groups/{group}/transitiveMembers`` with paging; 429 with ``Retry-After`` on demand.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi import FastAPI, Form, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

TENANT = "contoso-tenant"
CLIENT_ID = "ferret-app"
CLIENT_SECRET = "app-secret"
SITE = "contoso.sharepoint.com,site-1,web-1"
EVERYONE = {
    "siteUser": {
        "displayName": "Everyone except external users",
        "loginName": "c:0-.f|rolemanager|spo-grid-all-users/t",
    }
}


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files); the certificate is also the CA to trust."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "graph-cert.pem", folder / "graph-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@dataclass
class Item:
    id: str
    name: str
    parent: str  # folder path below the drive root, "" for the root
    content: bytes
    modified: dt.datetime
    seq: int
    deleted: bool = False
    permissions: list[dict[str, Any]] = field(default_factory=list)
    sharing_seq: int = 0


class GraphStub:
    """The tenant's state; tests change it through these methods."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.drives: dict[str, dict[str, Item]] = {}
        self.drive_permissions: dict[str, list[dict[str, Any]]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.tokens: set[str] = set()
        self.token_requests = 0
        self.requests: list[str] = []
        self.throttle_next = 0
        self.outage = False
        self.retry_after = "1"
        self.page_size = 2
        self.seq = 0
        self.epoch = 0
        self._ids = 0
        self.app = self._build_app()

    # -- state changes ------------------------------------------------------------------------------------

    def _bump(self) -> int:
        self.seq += 1
        return self.seq

    def add_drive(self, drive_id: str, readers: list[dict[str, Any]]) -> None:
        """A document library; ``readers`` (identity sets) are inherited by every item."""
        with self.lock:
            self.drives[drive_id] = {}
            self.drive_permissions[drive_id] = readers

    def add_group(self, group_id: str, name: str, members: list[str]) -> None:
        """Members are user e-mail addresses or other group ids (``transitiveMembers`` expands them)."""
        with self.lock:
            self.groups[group_id] = {"displayName": name, "members": members}

    def put(self, drive: str, path: str, content: bytes, item_id: str | None = None) -> str:
        with self.lock:
            parent, _, name = path.rpartition("/")
            if item_id is None:
                self._ids += 1
                item_id = f"01ITEM{self._ids:04d}"
            existing = self.drives[drive].get(item_id)
            permissions = existing.permissions if existing else []
            self.drives[drive][item_id] = Item(
                item_id, name, parent, content, dt.datetime.now(dt.UTC), self._bump(), permissions=permissions
            )
            return item_id

    def move(self, drive: str, item_id: str, path: str) -> None:
        with self.lock:
            item = self.drives[drive][item_id]
            item.parent, _, item.name = path.rpartition("/")
            item.seq = self._bump()

    def delete(self, drive: str, item_id: str) -> None:
        with self.lock:
            item = self.drives[drive][item_id]
            item.deleted, item.seq = True, self._bump()

    def share(self, drive: str, item_id: str, identities: list[dict[str, Any]], *, only: bool = False) -> None:
        """Grant read to identity sets; ``only`` breaks inheritance (the item's own grants replace the drive's)."""
        with self.lock:
            item = self.drives[drive][item_id]
            grants = [{"id": f"perm-{i}", "roles": ["read"], "grantedToV2": who} for i, who in enumerate(identities)]
            item.permissions = [*grants, {"id": "unique", "roles": []}] if only else grants
            item.sharing_seq = self._bump()

    def share_link(self, drive: str, item_id: str, scope: str, identities: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        """A view link: ``organization`` or ``anonymous`` scope, or ``users`` for the identities named."""
        with self.lock:
            item = self.drives[drive][item_id]
            link: dict[str, Any] = {"id": f"link-{scope}", "roles": ["read"], "link": {"scope": scope, "type": "view"}}
            if identities:
                link["grantedToIdentitiesV2"] = list(identities)
            item.permissions = [*item.permissions, link]
            item.sharing_seq = self._bump()

    def expire_tokens(self) -> None:
        """Every delta token issued so far is now too old: the next delta answers 410 resyncRequired."""
        with self.lock:
            self.epoch += 1

    # -- JSON shapes ---------------------------------------------------------------------------------------

    def _item_json(self, base: str, drive: str, item: Item) -> dict[str, Any]:
        if item.deleted:
            return {"id": item.id, "deleted": {"state": "deleted"}, "parentReference": {"driveId": drive}}
        return {
            "id": item.id,
            "name": item.name,
            "size": len(item.content),
            "eTag": f'"{item.id},{item.seq}"',
            "lastModifiedDateTime": item.modified.isoformat().replace("+00:00", "Z"),
            "webUrl": f"{base}/sites/web/{drive}/{item.parent + '/' if item.parent else ''}{item.name}",
            "parentReference": {
                "driveId": drive,
                "path": f"/drives/{drive}/root:" + (f"/{item.parent}" if item.parent else ""),
            },
            "file": {"mimeType": "application/octet-stream", "hashes": {}},
        }

    def _permissions(self, drive: str, item: Item) -> list[dict[str, Any]]:
        own = [grant for grant in item.permissions if grant["roles"]]
        if any(not grant["roles"] for grant in item.permissions):
            return own
        inherited = [
            {"id": f"inh-{i}", "roles": ["read"], "grantedToV2": who, "inheritedFrom": {"driveId": drive, "path": "/"}}
            for i, who in enumerate(self.drive_permissions[drive])
        ]
        return inherited + own

    def _delta_page(self, request: Request, drive: str, token: dict[str, int], sharing: bool) -> dict[str, Any]:
        since, upto, offset = token["since"], token["upto"], token["offset"]
        base = str(request.base_url).rstrip("/")
        changed = sorted(
            (
                item
                for item in self.drives[drive].values()
                if since < item.seq <= upto or (sharing and since < item.sharing_seq <= upto)
            ),
            key=lambda item: max(item.seq, item.sharing_seq if sharing else 0),
        )
        if since == 0:
            changed = [item for item in changed if not item.deleted]
        page = changed[offset : offset + self.page_size]
        body: dict[str, Any] = {"value": [self._item_json(base, drive, item) for item in page]}
        link = f"{base}/v1.0/drives/{drive}/root/delta?token="
        if offset + self.page_size < len(changed):
            state = {"since": since, "upto": upto, "offset": offset + self.page_size, "epoch": self.epoch}
            body["@odata.nextLink"] = link + _token(state)
        else:
            body["@odata.deltaLink"] = link + _token({"since": upto, "epoch": self.epoch})
        return body

    # -- the app -------------------------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def gate(request: Request, call_next: Any) -> Any:
            self.requests.append(request.url.path)
            if self.throttle_next > 0 and request.url.path.startswith("/v1.0/"):
                self.throttle_next -= 1
                error = {"error": {"code": "TooManyRequests", "message": "Please retry after"}}
                return JSONResponse(error, status_code=429, headers={"Retry-After": self.retry_after})
            if self.outage and request.url.path.startswith("/v1.0/"):
                error = {"error": {"code": "serviceNotAvailable", "message": "Service unavailable"}}
                return JSONResponse(error, status_code=503)
            if request.url.path.startswith("/v1.0/"):
                auth = request.headers.get("authorization", "")
                if not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
                    error = {"error": {"code": "InvalidAuthenticationToken", "message": "Access token is empty."}}
                    return JSONResponse(error, status_code=401)
            return await call_next(request)

        @app.get("/{tenant}/v2.0/.well-known/openid-configuration")
        def openid(request: Request, tenant: str) -> Any:
            base = str(request.base_url).rstrip("/")
            return {
                "issuer": f"{base}/{tenant}/v2.0",
                "authorization_endpoint": f"{base}/{tenant}/oauth2/v2.0/authorize",
                "token_endpoint": f"{base}/{tenant}/oauth2/v2.0/token",
            }

        @app.post("/{tenant}/oauth2/v2.0/token")
        def token(
            tenant: str,
            grant_type: str = Form(),
            client_id: str = Form(),
            client_secret: str = Form(""),
            scope: str = Form(""),
        ) -> Any:
            self.token_requests += 1
            if tenant != TENANT or client_id != CLIENT_ID or client_secret != CLIENT_SECRET:
                error = {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.",
                }
                return JSONResponse(error, status_code=401)
            if grant_type != "client_credentials":
                return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
            issued = f"token-{self.token_requests}"
            self.tokens.add(issued)
            return {"token_type": "Bearer", "expires_in": 3600, "access_token": issued}

        @app.get("/v1.0/sites/{site}/drives")
        def drives(site: str) -> Any:
            if site != SITE:
                return _graph_error(404, "itemNotFound", "Requested site could not be found")
            return {
                "value": [{"id": drive, "name": drive.title(), "driveType": "documentLibrary"} for drive in self.drives]
            }

        @app.get("/v1.0/drives/{drive}/root/delta")
        def delta(request: Request, drive: str, token: str = "") -> Any:
            with self.lock:
                if drive not in self.drives:
                    return _graph_error(404, "itemNotFound", "The resource could not be found.")
                parsed = _untoken(token) if token else {"since": 0, "epoch": self.epoch}
                if parsed["epoch"] != self.epoch:
                    message = "Resync required. Replace any local items with the server's version."
                    return _graph_error(410, "resyncRequired", message)
                if "upto" not in parsed:  # a delta link (or a first request): changes up to now, from the start
                    parsed = {"since": parsed["since"], "upto": self.seq, "offset": 0}
                sharing = "deltashowsharingchanges" in request.headers.get("prefer", "")
                return self._delta_page(request, drive, parsed, sharing)

        @app.get("/v1.0/drives/{drive}/items/{item_id}/content")
        def content(request: Request, drive: str, item_id: str) -> Any:
            with self.lock:
                item = self.drives.get(drive, {}).get(item_id)
                if item is None or item.deleted:
                    return _graph_error(404, "itemNotFound", "The resource could not be found.")
                return RedirectResponse(
                    f"{str(request.base_url).rstrip('/')}/download/{drive}/{item_id}?seq={item.seq}", 302
                )

        @app.get("/download/{drive}/{item_id}")
        def download(drive: str, item_id: str) -> Any:
            with self.lock:  # pre-authenticated, as SharePoint's download URLs are
                return Response(self.drives[drive][item_id].content, media_type="application/octet-stream")

        @app.get("/v1.0/drives/{drive}/items/{item_id}/permissions")
        def permissions(drive: str, item_id: str) -> Any:
            with self.lock:
                item = self.drives.get(drive, {}).get(item_id)
                if item is None or item.deleted:
                    return _graph_error(404, "itemNotFound", "The resource could not be found.")
                return {"value": self._permissions(drive, item)}

        @app.get("/v1.0/groups/{group_id}/transitiveMembers")
        def members(request: Request, group_id: str, skip: int = 0) -> Any:
            with self.lock:
                if group_id not in self.groups:
                    return _graph_error(404, "Request_ResourceNotFound", f"Resource '{group_id}' does not exist.")
                found = self._transitive(group_id, set())
            page = found[skip : skip + self.page_size]
            body: dict[str, Any] = {"value": page}
            if skip + self.page_size < len(found):
                base = str(request.base_url).rstrip("/")
                body["@odata.nextLink"] = (
                    f"{base}/v1.0/groups/{group_id}/transitiveMembers?skip={skip + self.page_size}"
                )
            return body

        return app

    def _transitive(self, group_id: str, seen: set[str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for member in self.groups[group_id]["members"]:
            if member in self.groups:
                if member not in seen:
                    seen.add(member)
                    found.append({"@odata.type": "#microsoft.graph.group", "id": member})
                    found += self._transitive(member, seen)
            elif member not in seen:
                seen.add(member)
                found.append(
                    {
                        "@odata.type": "#microsoft.graph.user",
                        "id": f"u-{member}",
                        "mail": member,
                        "userPrincipalName": member,
                    }
                )
        return found


def user(email: str) -> dict[str, Any]:
    """An identity set naming one user, as ``grantedToV2`` does."""
    return {"user": {"id": f"u-{email}", "displayName": email.split("@")[0].title(), "email": email}}


def group(group_id: str, name: str) -> dict[str, Any]:
    """An identity set naming one Entra group."""
    return {"group": {"id": group_id, "displayName": name}}


def _token(state: dict[str, int]) -> str:
    return base64.urlsafe_b64encode(json.dumps(state).encode()).decode()


def _untoken(token: str) -> dict[str, int]:
    state: dict[str, int] = json.loads(base64.urlsafe_b64decode(token.encode()))
    return state


def _graph_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
