"""Sync throughput of the smb, confluence and sharepoint connectors, one run.

Usage:
    python benchmarks/sync_vendor_connectors.py --dataset ../shared/datasets/scifact [--docs 2000] [--embed-docs 200] \
        [--connectors smb,confluence,sharepoint] [--json benchmarks/out/sync_vendor.json]

The first --docs documents of the dataset's corpus become files on a real Samba share (run as root, Debian samba),
pages of the Confluence Data Center stub, and files of a SharePoint library on the Graph stub (the same servers as
the tests, tests/connectors/servers). For each connector, on this machine:

- connector: iterating ``sync(None)`` alone (listing, download, parsing, permissions), documents/s;
- engine, no embedding: ``SourceSync`` into a fresh Ferret (SQLite, chunking, rows) with no live index version;
- no-change re-sync: the next ``SourceSync`` from the stored cursor, with the permission pass, the deletion
  listing and the group memberships it runs every time (seconds). The SMB and Confluence watermark overlaps are
  set to 0 here: every document was written seconds before, and a default overlap (5 minutes) would deliver all of
  them again, which is what a re-sync within 5 minutes of a bulk change does (the content hash makes it harmless);
- engine, with embedding: on a second server, --embed-docs new documents synced after a one-document index version
  was built and promoted, so every synced passage is embedded with the base encoder and upserted into the live
  version (Qdrant Edge). Fewer documents than the other rows: embedding dominates and the CPU is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test servers

from ferret.core.sources.documents import Document
from ferret.core.sources.incremental import IncrementalConnector
from speed_support import machine_info, open_platform, open_session


@dataclass
class Row:
    connector: str
    docs: int
    connector_docs_s: float
    engine_docs_s: float
    embed_docs: int
    embedded_docs_s: float
    passages_embedded: int
    resync_s: float


def dataset_documents(dataset: Path, limit: int) -> list[tuple[str, str, str]]:
    """``(id, title, text)`` of the first ``limit`` documents of a BEIR corpus with some text."""
    found = []
    with (dataset / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if str(row.get("text", "")).strip():
                found.append((str(row["_id"]), str(row.get("title") or row["_id"]), str(row["text"])))
            if len(found) == limit:
                break
    return found


# -- the three servers: each yields (put(key, title, text), make_connector(name)) ----------------------------------

Setup = tuple[Callable[[str, str, str], None], Callable[[str], IncrementalConnector]]


@contextmanager
def smb_server(tmp: Path) -> Iterator[Setup]:
    from connectors.servers.samba import SambaServer, samba_missing
    from ferret.connectors.smb.connector import SmbConnector
    from ferret_testing import free_port

    missing = samba_missing()
    if missing:
        raise SystemExit(missing)
    server = SambaServer(tmp / "samba", free_port()).start(["ferret-smb-staff"])
    sid = server.group_sid("ferret-smb-staff")

    def put(key: str, title: str, text: str) -> None:
        server.write(f"docs/{key[:2]}/{key}.md", f"# {title}\n\n{text}\n", group="ferret-smb-staff", mode=0o640)

    def connector(name: str) -> IncrementalConnector:
        config = server.connector_config(
            name=name, sid_groups={sid: "staff"}, ignore_sids=["S-1-22-1-0"], overlap_seconds=0
        )
        return SmbConnector(**config)

    try:
        yield put, connector
    finally:
        server.stop()


@contextmanager
def confluence_server(tmp: Path) -> Iterator[Setup]:
    from connectors.servers.confluence_stub import PASSWORD, USERNAME, ConfluenceStub
    from connectors.servers.uvicorn_thread import serve
    from ferret.connectors.confluence.connector import ConfluenceConnector
    from ferret_testing import free_port

    stub = ConfluenceStub()
    stub.add_space("DOCS", view_groups=["staff"])
    running = serve(stub.app, free_port())

    def put(key: str, title: str, text: str) -> None:
        stub.add_page("DOCS", title, f"<p>{text}</p>")

    def connector(name: str) -> IncrementalConnector:
        return ConfluenceConnector(
            url=running.url,
            username=USERNAME,
            password=PASSWORD,
            spaces=["DOCS"],
            name=name,
            page_size=50,
            overlap_minutes=0,
        )

    try:
        yield put, connector
    finally:
        running.stop()


@contextmanager
def sharepoint_server(tmp: Path) -> Iterator[Setup]:
    from connectors.servers.graph_stub import CLIENT_ID, CLIENT_SECRET, SITE, TENANT, GraphStub, group
    from connectors.servers.graph_stub import self_signed_certificate as certificate_for
    from connectors.servers.uvicorn_thread import serve
    from ferret.connectors.sharepoint.connector import SharePointConnector
    from ferret_testing import free_port

    stub = GraphStub()
    stub.page_size = 200  # Graph's delta pages hold up to a few hundred items
    stub.add_drive("docs", [group("staff", "Staff")])
    tmp.mkdir(parents=True, exist_ok=True)
    cert, key = certificate_for(tmp)
    running = serve(stub.app, free_port(), tls=(cert, key))

    def put(key_: str, title: str, text: str) -> None:
        stub.put("docs", f"{key_[:2]}/{key_}.md", f"# {title}\n\n{text}\n".encode())

    def connector(name: str) -> IncrementalConnector:
        return SharePointConnector(
            tenant_id=TENANT,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            site_id=SITE,
            name=name,
            authority_host=running.url,
            graph_url=f"{running.url}/v1.0",
            ca_bundle=str(cert),
        )

    try:
        yield put, connector
    finally:
        running.stop()


SERVERS = {"smb": smb_server, "confluence": confluence_server, "sharepoint": sharepoint_server}


# -- the measurements ------------------------------------------------------------------------------------------


class Ferret:
    """A fresh embedded Ferret with one corpus and one source row, synced through ``SourceSync``."""

    def __init__(self, home: Path, kind: str) -> None:
        from ferret.core.db.corpus import get_or_create_corpus
        from ferret.core.db.models import Source

        self.platform = open_platform(home)
        self.session = open_session(self.platform.settings)
        self.corpus = get_or_create_corpus(self.session, "bench")
        self.source = Source(corpus_id=self.corpus.id, name=kind, kind=kind, config={})
        self.session.add(self.source)
        self.session.commit()

    def sync(self, connector: IncrementalConnector) -> tuple[float, dict[str, Any]]:
        from ferret.core.sources.sync import SourceSync

        started = time.perf_counter()
        run = SourceSync(
            self.session, self.platform.settings, self.platform.backend, self.corpus, self.source
        ).run_sync(connector)
        connector.close()
        return time.perf_counter() - started, dict(run.counts)

    def index(self) -> None:
        from ferret.core.encoder.registry import ModelRegistry
        from ferret.core.index.versioned_collection import VersionedCollection

        settings = self.platform.settings
        versions = VersionedCollection(self.session, settings, self.platform.backend, self.corpus)
        versions.promote(versions.build(ModelRegistry(self.session, settings).ensure_base()))

    def close(self) -> None:
        self.session.close()
        self.platform.backend.close()


def bench(kind: str, documents: list[tuple[str, str, str]], embed_docs: int, tmp: Path) -> Row:
    with SERVERS[kind](tmp / "all") as (put, make):
        for doc_id, title, text in documents:
            put(doc_id, title, text)
        started = time.perf_counter()
        delivered = sum(isinstance(item, Document) for item in make(kind).sync(None))
        connector_s = time.perf_counter() - started
        assert delivered == len(documents), (kind, delivered)

        plain = Ferret(tmp / "home-plain", kind)
        plain_s, plain_counts = plain.sync(make(kind))
        assert plain_counts["new"] == len(documents), plain_counts
        resync_s, again = plain.sync(make(kind))
        assert again["new"] == again["changed"] == again["deleted"] == again["permission_updates"] == 0, again
        plain.close()

    # embedding: a one-document live version first, then ``embed_docs`` new documents synced into it
    with SERVERS[kind](tmp / "embed") as (put, make):
        seed_id, seed_title, seed_text = documents[0]
        put(seed_id, seed_title, seed_text)
        embedded = Ferret(tmp / "home-embedded", kind)
        embedded.sync(make(kind))
        embedded.index()
        for doc_id, title, text in documents[1 : embed_docs + 1]:
            put(doc_id, title, text)
        embedded_s, counts = embedded.sync(make(kind))
        assert counts["new"] == embed_docs, counts
        embedded.close()
    return Row(
        kind,
        len(documents),
        len(documents) / connector_s,
        len(documents) / plain_s,
        embed_docs,
        embed_docs / embedded_s,
        int(counts["passages_embedded"]),
        resync_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="a BEIR folder (corpus.jsonl)")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--embed-docs", type=int, default=200, help="documents synced into a live index version")
    parser.add_argument("--connectors", default="smb,confluence,sharepoint")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    documents = dataset_documents(args.dataset, args.docs)
    rows = []
    for kind in args.connectors.split(","):
        with tempfile.TemporaryDirectory(prefix=f"ferret-bench-{kind}-") as tmp:
            rows.append(bench(kind, documents, min(args.embed_docs, len(documents) - 1), Path(tmp)))
            print(f"{kind}: {rows[-1]}", file=sys.stderr)
    header = "| connector | docs | connector docs/s | engine docs/s (no embedding) | no-change re-sync s | "
    header += "docs synced with embedding | passages embedded | engine docs/s (embedding) |"
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.connector} | {row.docs} | {row.connector_docs_s:.0f} | {row.engine_docs_s:.1f} | "
            f"{row.resync_s:.1f} | {row.embed_docs} | {row.passages_embedded} | {row.embedded_docs_s:.2f} |"
        )
    info = machine_info()
    print(
        f"\n{info['date']}, {info['cpu']} ({info['cpus']} CPUs, load {info['load_average']}), commit {info['commit']}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": info, "rows": [row.__dict__ for row in rows]}, indent=2))


if __name__ == "__main__":
    main()
