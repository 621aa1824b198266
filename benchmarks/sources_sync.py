"""Sync throughput of the filesystem, sql, git, web and s3 connectors on real local servers, one run.

Usage:
    python benchmarks/sources_sync.py --dataset ../shared/datasets/scifact [--docs 2000] \
        [--embed-docs 300] [--connectors filesystem,sql,git,web,s3] [--json benchmarks/out/sources_sync.json]

The first --docs documents of the dataset's corpus are put on each server (Markdown files in a folder of a hundred
files per subfolder, a SQLite table read through SQLAlchemy,
a repository served by ``git daemon``, a uvicorn site with a sitemap, a SeaweedFS bucket with tags), using the
suite's test servers (tests/connectors/servers). For each connector, in one fresh Ferret home:

- **fetch**: the connector alone, ``sync(None)`` drained: listing, transfer and text extraction, no storage;
- **sync, no embedding**: a first full sync through ``SourceSync`` with no live index version (rows, chunking,
  checkpoints, listing and permission pass);
- **no-change re-sync**: a second sync of the same documents with nothing changed;
- **sync + embedding**: the first --embed-docs documents synced into a second corpus that has a live index version
  (built on one seed document first), so every new passage is embedded with the base MiniLM and upserted; then
  synced again with nothing changed (nothing may be re-embedded).

Documents per second are over the documents of the run (the seed document excluded where it is unchanged).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sqlalchemy import select

from connectors.servers.git_daemon import GitDaemon, git
from connectors.servers.seaweed import ADMIN, SeaweedServer
from connectors.servers.uvicorn_thread import serve
from connectors.servers.website import Site
from ferret.connectors.registry import build_connector
from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.migrate import upgrade
from ferret.core.db.models import Corpus, Source
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.eval.beir import iter_corpus
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.settings import FerretSettings
from ferret.core.sources.incremental import IncrementalConnector
from ferret.core.sources.sync import SourceSync, iter_documents
from ferret_testing import free_port

Docs = list[tuple[str, str, str]]
"""(key, title, text) of the generated documents."""


@contextmanager
def sql_source(root: Path, docs: Docs) -> Iterator[Callable[[], IncrementalConnector]]:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "kb.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE docs (id TEXT PRIMARY KEY, title TEXT, body TEXT, teams TEXT, updated TEXT)")
        connection.executemany(
            "INSERT INTO docs VALUES (?, ?, ?, 'staff', datetime('now'))", [(k, t, x) for k, t, x in docs]
        )
    config = {
        "url": f"sqlite:///{path}",
        "table": "docs",
        "title_column": "title",
        "text_columns": ["body"],
        "acl_column": "teams",
    }
    yield lambda: _build("sql", config)


@contextmanager
def git_source(root: Path, docs: Docs) -> Iterator[Callable[[], IncrementalConnector]]:
    daemon = GitDaemon(root / "repos").start()
    try:
        repo = daemon.new_repo("kb")
        for key, title, text in docs:
            (repo / f"{key}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", "docs")
        config = {"url": daemon.url("kb"), "branch": "main", "groups": ["staff"], "cache_dir": str(root / "cache")}
        yield lambda: _build("git", config)
    finally:
        daemon.stop()


@contextmanager
def web_source(root: Path, docs: Docs) -> Iterator[Callable[[], IncrementalConnector]]:
    site = Site()
    for key, title, text in docs:
        site.put(f"/kb/{key}", title, text)
    app = serve(site.app(), free_port())
    try:
        config = {"start_urls": [f"{app.url}/"], "acl": {f"{app.url}/": ["staff"]}, "max_pages": len(docs) + 10}
        yield lambda: _build("web", config)
    finally:
        app.stop()


@contextmanager
def s3_source(root: Path, docs: Docs) -> Iterator[Callable[[], IncrementalConnector]]:
    server = SeaweedServer(root / "weed").start()
    try:
        client = server.client()
        client.create_bucket(Bucket="kbase")
        for key, title, text in docs:
            body = f"# {title}\n\n{text}\n".encode()
            client.put_object(Bucket="kbase", Key=f"{key}.md", Body=body, Tagging="ferret-groups=staff")
        config = {
            "bucket": "kbase",
            "endpoint_url": server.endpoint,
            "access_key_id": ADMIN[0],
            "secret_access_key": ADMIN[1],
            "acl_tag": "ferret-groups",
        }
        yield lambda: _build("s3", config)
    finally:
        server.stop()


@contextmanager
def filesystem_source(root: Path, docs: Docs) -> Iterator[Callable[[], IncrementalConnector]]:
    folder = root / "share"
    for index, (key, title, text) in enumerate(docs):
        subfolder = folder / f"{index // 100:03d}"  # a hundred files a folder, as a share would hold them
        subfolder.mkdir(parents=True, exist_ok=True)
        (subfolder / f"{key}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
    yield lambda: _build("filesystem", {"root": str(folder), "acl": {"*": ["staff"]}})


SOURCES = {
    "filesystem": filesystem_source,
    "sql": sql_source,
    "git": git_source,
    "web": web_source,
    "s3": s3_source,
}


def _build(kind: str, config: dict[str, Any]) -> IncrementalConnector:
    connector = build_connector(kind, name=kind, **config)
    assert isinstance(connector, IncrementalConnector)
    return connector


def sync_once(
    settings: FerretSettings, backend: EdgeIndexBackend, corpus: str, kind: str, connector: IncrementalConnector
) -> tuple[float, dict[str, Any]]:
    with session_scope(settings.database_url) as session:
        corpus_row = session.scalars(select(Corpus).where(Corpus.name == corpus)).one()
        source = session.scalars(select(Source).where(Source.corpus_id == corpus_row.id, Source.name == kind)).first()
        if source is None:
            source = Source(corpus_id=corpus_row.id, name=kind, kind=kind, config={})
            session.add(source)
            session.commit()
        engine = SourceSync(session, settings, backend, corpus_row, source, checkpoint_every=200)  # loads the tokenizer
        started = time.perf_counter()
        run = engine.run_sync(connector)
        return time.perf_counter() - started, dict(run.counts)


def measure(kind: str, docs: Docs, embed_docs: int, root: Path) -> dict[str, Any]:
    settings = FerretSettings(home=root / "home")
    settings.ensure_home()
    upgrade(settings.database_url)
    backend = EdgeIndexBackend(settings.qdrant_path)
    row: dict[str, Any] = {"connector": kind, "documents": len(docs), "embed_documents": embed_docs}
    try:
        with session_scope(settings.database_url) as session:
            create_corpus(session, "plain")
            create_corpus(session, "embedded")
        with SOURCES[kind](root / "all", docs) as connector:
            started = time.perf_counter()
            row["fetched"] = sum(1 for _ in iter_documents(connector()))
            row["fetch_s"] = time.perf_counter() - started
            row["sync_s"], counts = sync_once(settings, backend, "plain", kind, connector())
            row["synced"] = counts["new"]
            row["resync_s"], counts = sync_once(settings, backend, "plain", kind, connector())
            row["resync_changed"] = counts["new"] + counts["changed"] + counts["deleted"] + counts["permission_updates"]
        # A live index version on the second corpus: seed it with one document, build and promote; then the
        # first embed_docs documents are synced into it, each new passage embedded with the base MiniLM.
        with SOURCES[kind](root / "seed", docs[:1]) as seed:
            sync_once(settings, backend, "embedded", kind, seed())
        with session_scope(settings.database_url) as session:
            corpus_row = session.scalars(select(Corpus).where(Corpus.name == "embedded")).one()
            versions = VersionedCollection(session, settings, backend, corpus_row)
            versions.promote(versions.build(ModelRegistry(session, settings).ensure_base()))
        with SOURCES[kind](root / "embed", docs[:embed_docs]) as connector:
            row["embed_sync_s"], counts = sync_once(settings, backend, "embedded", kind, connector())
            row["embedded_passages"] = counts["passages_embedded"]
            row["embed_synced"] = counts["new"] + counts["changed"]
            row["embed_resync_s"], counts = sync_once(settings, backend, "embedded", kind, connector())
            row["resync_embedded"] = counts["passages_embedded"]
    finally:
        backend.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="A BEIR dataset folder (its corpus.jsonl).")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--embed-docs", type=int, default=300, help="Documents of the sync with embedding.")
    parser.add_argument("--connectors", default="filesystem,sql,git,web,s3")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    docs: Docs = [
        (f"doc-{index:05d}", record.title or f"Document {index}", record.text)
        for index, record in enumerate(islice((r for r in iter_corpus(args.dataset) if r.text.strip()), args.docs))
    ]
    rows = []
    with ExitStack() as stack:
        for kind in args.connectors.split(","):
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"ferret-bench-{kind}-")))
            rows.append(measure(kind, docs, args.embed_docs, root))
            print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| connector | docs | fetch only (docs/s) | sync, no embedding (docs/s) | no-change re-sync (s) "
        "| changed on re-sync | sync + embedding (docs/s) | passages embedded | re-embedded on re-sync |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        fetch_rate, sync_rate = row["fetched"] / row["fetch_s"], row["synced"] / row["sync_s"]
        embed_rate = row["embed_synced"] / row["embed_sync_s"]
        print(
            f"| {row['connector']} | {row['documents']:,} | {fetch_rate:.0f} | {sync_rate:.0f} | {row['resync_s']:.1f} "
            f"| {row['resync_changed']} | {embed_rate:.1f} ({row['embed_synced']} docs) | {row['embedded_passages']:,} "
            f"| {row['resync_embedded']} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
