"""Who may read a file on an SMB share: its DACL read over SMB2 QUERY_INFO, mapped to Ferret principals.

A Windows (or Samba) file is readable by a user when the share ACL *and* the file's DACL both grant it. Ferret's
query-time filter is "any of" a document's principals, so the two layers are flattened here, at index time:

- DACL ([MS-DTYP] 2.4.5): the SIDs of the allow-ACEs that carry a read right, minus the SIDs of deny-ACEs that
  carry one (a deny of Everyone or Authenticated Users empties it). Inherit-only ACEs do not apply to the object
  itself and are ignored. A missing (NULL) DACL grants everyone; an empty DACL grants nobody.
- Everyone (``S-1-1-0``) and Authenticated Users (``S-1-5-11``) become ``public``; other SIDs become the group or
  user the configuration maps them to, and an unmapped SID becomes ``<source>:group:<SID>``, a group nobody is
  a member of until one is configured: an unknown SID never widens access.
- Share ∧ file: when both layers name principals, only those in both remain; ``public`` in one layer means "the
  other layer decides". Intersecting principals (not people) can only narrow access: a user allowed by the share
  through a group and by the file through their own SID is left out, never someone allowed by neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from smbprotocol.file_info import InfoType
from smbprotocol.open import (
    InfoAdditionalInformation,
    Open,
    SMB2QueryInfoRequest,
    SMB2QueryInfoResponse,
)
from smbprotocol.security_descriptor import AceType, SMB2CreateSDBuffer

from ferret.core.sources.principals import PUBLIC, group_principal, user_principal

EVERYONE_SIDS = frozenset({"S-1-1-0", "S-1-5-11"})
"""Everyone and Authenticated Users: every caller of the search API has an account, so both mean public."""

ADMIN_SIDS = ("S-1-5-18", "S-1-5-32-544", "S-1-3-0", "S-1-3-1")
"""SYSTEM, BUILTIN\\Administrators, CREATOR OWNER and CREATOR GROUP: present in most DACLs, no one to search as."""

READ_RIGHTS = 0x00000001 | 0x80000000 | 0x10000000
"""FILE_READ_DATA, GENERIC_READ and GENERIC_ALL ([MS-DTYP] 2.4.3): any of them lets a user read the content."""

_INHERIT_ONLY = 0x08
_MAX_SECURITY_DESCRIPTOR_BYTES = 65_536


@dataclass(frozen=True)
class Ace:
    """One access control entry, reduced to what a read decision needs."""

    allow: bool
    sid: str
    mask: int
    flags: int = 0


def query_dacl(handle: Open) -> list[Ace] | None:
    """The DACL of an open file (opened with READ_CONTROL); ``None`` when the file has no DACL (everyone).

    smbclient has no call for security descriptors, so this sends the SMB2 QUERY_INFO request of [MS-SMB2]
    2.2.37 with ``InfoType=SECURITY`` and ``AdditionalInformation=DACL`` on the handle's own connection.
    """
    request = SMB2QueryInfoRequest()
    request["info_type"] = InfoType.SMB2_0_INFO_SECURITY
    request["output_buffer_length"] = _MAX_SECURITY_DESCRIPTOR_BYTES
    request["additional_information"] = InfoAdditionalInformation.DACL_SECURITY_INFORMATION
    request["file_id"] = handle.file_id
    session = handle.tree_connect.session
    sent = handle.connection.send(request, session.session_id, handle.tree_connect.tree_connect_id)
    response = handle.connection.receive(sent)
    query = SMB2QueryInfoResponse()
    query.unpack(response["data"].get_value())
    descriptor = SMB2CreateSDBuffer()
    descriptor.unpack(query["buffer"].get_value())
    dacl: Any = descriptor.get_dacl()
    if dacl is None:
        return None
    aces = []
    for ace in dacl["aces"].get_value():
        kind = ace["ace_type"].get_value()
        if kind not in (AceType.ACCESS_ALLOWED_ACE_TYPE, AceType.ACCESS_DENIED_ACE_TYPE):
            continue  # object and callback ACEs do not occur on files
        aces.append(
            Ace(
                allow=kind == AceType.ACCESS_ALLOWED_ACE_TYPE,
                sid=str(ace["sid"].get_value()),
                mask=ace["mask"].get_value(),
                flags=ace["ace_flags"].get_value(),
            )
        )
    return aces


def readers(aces: list[Ace] | None) -> set[str]:
    """SIDs allowed to read: read allow-ACEs minus read deny-ACEs (a deny of Everyone leaves nobody)."""
    if aces is None:
        return {"S-1-1-0"}
    effective = [ace for ace in aces if ace.mask & READ_RIGHTS and not ace.flags & _INHERIT_ONLY]
    denied = {ace.sid for ace in effective if not ace.allow}
    if denied & EVERYONE_SIDS:
        return set()
    return {ace.sid for ace in effective if ace.allow} - denied


def sid_principals(
    sids: Iterable[str], source: str, sid_groups: Mapping[str, str], sid_users: Mapping[str, str]
) -> set[str]:
    """SIDs to principals: ``public``, ``user:<email>`` or ``<source>:group:<name or SID>``."""
    principals = set()
    for sid in sids:
        if sid in EVERYONE_SIDS:
            principals.add(PUBLIC)
        elif sid in sid_users:
            principals.add(user_principal(sid_users[sid]))
        else:
            principals.add(group_principal(source, sid_groups.get(sid, sid)))
    return principals


def flatten_share_and_file(share: set[str] | None, file: set[str]) -> list[str]:
    """Principals allowed by both layers ("any of" after flattening); ``None`` or ``public`` = no restriction.

    ``public`` alone stands for a public layer: the other principals add nothing to "any of".
    """
    if share is None or PUBLIC in share:
        return [PUBLIC] if PUBLIC in file else sorted(file)
    if PUBLIC in file:
        return sorted(share)
    return sorted(share & file)
