"""An API client cannot run `ferret ...`: where the CLI's sentence names a command, the API's names the route.

The first test asks the running app; the second reads the source, so a new error naming a CLI command from code
that the API reaches says how an HTTP client does the same, or is listed below with the reason it cannot.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

Auth = Callable[[str], dict[str, str]]
CORE = Path(__file__).resolve().parents[2] / "platform" / "ferret" / "core"

SERVER_ONLY_REMEDIES = {
    "corpus/ingest.py": "a source's folder is mounted, or a source removed, on the server (no route removes one)",
    "corpus/deletion.py": "corpora are deleted from the CLI and the admin only",
    "db/api_key.py": "the owner key is made at the server; an admin key cannot grant what it lacks",
    "db/job.py": "the stored error of a job whose embedded runner died: only a CLI process runs one",
    "index/edge_backend.py": "names the processes holding the embedded store, on the server",
    "jobs/progress.py": "Ctrl-C stops a CLI command",
    "qa/reader_store.py": "span readers are trained from the CLI only",
    "qa/span_reader.py": "span readers are trained from the CLI only",
    "sources/service.py": "sources are added from the CLI only (their secrets resolve on the server)",
}


def test_not_found_and_conflict_sentences_name_routes(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    assert client.post("/v1/corpora", json={"name": "no-index-yet"}, headers=admin).status_code == 201
    expected = {
        ("GET", "/v1/jobs/999"): (404, "Job 999 does not exist; GET /v1/jobs lists the recent ones."),
        ("GET", "/v1/tasks/nope"): (404, "Task 'nope' does not exist; create it with POST /v1/tasks."),
        ("GET", "/v1/corpora/zzz-nothing-like-it/index-versions"): (
            404,
            "Corpus 'zzz-nothing-like-it' does not exist; create it with POST /v1/corpora.",
        ),
        ("GET", "/v1/corpora/kb/sources/nope/syncs"): (
            404,
            "Corpus 'kb' has no source 'nope'; GET /v1/corpora/kb/sources lists the configured ones.",
        ),
        ("DELETE", "/v1/api-keys/nope"): (404, "API key 'nope' does not exist; GET /v1/api-keys lists the keys."),
        ("POST", "/v1/corpora/kb/index-versions/rollback"): (
            409,
            "Corpus 'kb' has nothing left to roll back to (version 1 is the oldest activation still ready); promote "
            "a version with POST /v1/corpora/kb/index-versions/{version}/promote.",
        ),
        ("POST", "/v1/corpora/kb/search-configs/rollback"): (
            409,
            "Corpus 'kb' has no earlier search configuration to roll back to (no configuration is active); promote "
            "one with POST /v1/corpora/kb/search-configs/{version}/promote.",
        ),
        ("POST", "/v1/corpora/no-index-yet/search"): (
            409,
            "Corpus 'no-index-yet' has no active index; build one with POST /v1/corpora/no-index-yet/index-versions "
            'and {"promote": true}.',
        ),
    }
    for (method, path), (code, sentence) in expected.items():
        body = {"query": "fjords"} if path.endswith("/search") else None
        response = client.request(method, path, json=body, headers=admin)
        assert (response.status_code, response.json()["detail"]) == (code, sentence), path


def _names_a_cli_command(node: ast.AST) -> bool:
    return any(
        isinstance(part, ast.Constant) and isinstance(part.value, str) and "`ferret " in part.value
        for part in ast.walk(node)
    )


def test_every_error_naming_a_cli_command_says_it_over_http_too() -> None:
    bare = []
    for path in sorted(CORE.rglob("*.py")):
        where = path.relative_to(CORE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if not node.func.id.endswith("Error") or not any(_names_a_cli_command(arg) for arg in node.args):
                continue
            if not any(keyword.arg == "over_http" for keyword in node.keywords) and where not in SERVER_ONLY_REMEDIES:
                bare.append(f"{where}:{node.lineno}")
    assert bare == [], "give these errors over_http=, or list the module with its reason"
