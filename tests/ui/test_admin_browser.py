"""End to end in a real browser: ``ferret admin`` (Streamlit, a real server process on 127.0.0.1) driven by Debian's
headless chromium through Playwright. The admin creates a task from examples found by search, launches a tiny
pipeline (six documents, six queries each, four training steps, the generator being llama.cpp's server on
SmolLM2), watches it finish, and searches the new version in the playground.

Screenshots land in ``test-artifacts/admin-e2e/`` at the repository root (or ``$FERRET_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ferret_testing import free_port, running_process, skip_or_fail

pytestmark = [pytest.mark.slow, pytest.mark.integration]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
PIPELINE_TIMEOUT_MS = 900_000  # a four-step training took 4 minutes on the shared 2-core machine
LOCAL_HOSTS = {"127.0.0.1", "localhost", None}  # None: data: and blob: URLs


@pytest.fixture
def artifacts() -> Path:
    folder = Path(os.environ.get("FERRET_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "admin-e2e"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def running_admin(log: Path) -> Iterator[str]:
    """``ferret admin`` as a real process over the current FERRET_HOME; its output goes to ``log``."""
    port = free_port()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", "from ferret.cli.main import main; main()", "admin", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with running_process(command, ready_url=f"{url}/_stcore/health", log=log, timeout_s=120, env=environment):
        yield url


@contextmanager
def browser_page(profile: Path) -> Iterator[Any]:
    """A page of Debian's headless chromium driven by Playwright, with a fresh user-data-dir."""
    if not CHROMIUM.exists():
        skip_or_fail("Debian's chromium is not installed.", "`make system-deps` installs it")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = browser.new_page()
            page.outside = []  # every request for another host than this machine (nothing may leave it)
            page.on(
                "request",
                lambda request: urlsplit(request.url).hostname not in LOCAL_HOSTS and page.outside.append(request.url),
            )
            yield page
        finally:
            browser.close()


@pytest.fixture
def admin_url(populated_home: Path, use_generator: str, tmp_path: Path) -> Iterator[str]:
    """``ferret admin`` over the populated store, its generator llama.cpp's server."""
    with running_admin(tmp_path / "admin.log") as url:
        yield url


def add_example(page: object, search: str, title: str, query: str, position: int) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    finder = page.get_by_label("Find example documents in the corpus")
    finder.fill(search)
    finder.press("Enter")
    row = page.get_by_text(title, exact=True).first
    expect(row).to_be_visible(timeout=60_000)
    page.locator(f".st-key-add-docs-{title.lower()}-md button").click()
    field = page.locator(f".st-key-example-query-{position} input")
    expect(field).to_be_visible(timeout=30_000)
    field.fill(query)
    field.press("Enter")


def choose(page: Any, select: str, option: str, attempts: int = 5) -> None:
    """Open the selectbox with element key ``select`` and click ``option``. The Jobs page re-renders its job list every
    two seconds, and a re-render can close an open dropdown before the option is clicked: open it again."""
    for attempt in range(attempts):
        page.locator(f".st-key-{select}").click()
        item = page.get_by_role("option", name=option)
        try:
            item.wait_for(state="visible", timeout=5_000)
            item.click(timeout=5_000)
            return
        except Exception:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")


def test_task_pipeline_and_playground_in_a_browser(admin_url: str, artifacts: Path, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with browser_page(tmp_path / "chromium-profile") as page:
        try:
            # 1. A task from two examples found by searching the corpus.
            page.goto(f"{admin_url}/tasks")
            expect(page.get_by_role("heading", name="Tasks")).to_be_visible(timeout=60_000)
            name = page.get_by_label("Name", exact=True)
            name.fill("kb-trivia")
            name.press("Enter")
            add_example(page, "capital city of France", "Paris", "what is the capital of France", 0)
            add_example(page, "yeast dough rising", "Bread", "why does bread dough rise", 1)
            page.get_by_role("button", name="Create task").click()
            expect(page.get_by_text("Task kb-trivia created with 2 examples.")).to_be_visible(timeout=60_000)
            page.screenshot(path=str(artifacts / "1-task.png"), full_page=True)

            # 2. A tiny pipeline, watched until it succeeds.
            page.goto(f"{admin_url}/jobs")
            expect(page.get_by_role("heading", name="Jobs")).to_be_visible(timeout=60_000)
            choose(page, "launch-task", "kb-trivia")
            for label, value in (("Queries per document", "6"), ("Training steps (0: scaled to the data)", "4")):
                box = page.get_by_label(label)
                box.fill(value)
                box.press("Tab")
            page.get_by_label("Model version name (empty: <task>-job<id>)").fill("kb-trivia-e2e")
            choose(page, "launch-promote", "force")
            page.get_by_role("button", name="Launch").click()
            expect(page.get_by_text("pipeline of task kb-trivia", exact=False).first).to_be_visible(timeout=60_000)
            finished = page.get_by_text(re.compile(r"kb-trivia · (succeeded|failed)")).first
            expect(finished).to_be_visible(timeout=PIPELINE_TIMEOUT_MS)
            assert "succeeded" in finished.inner_text(), page.locator(".stAlert").all_inner_texts()
            page.screenshot(path=str(artifacts / "2-jobs.png"), full_page=True)

            # 3. The new version against the old one in the playground.
            page.goto(f"{admin_url}/playground")
            expect(page.get_by_role("heading", name="Search playground")).to_be_visible(timeout=60_000)
            query = page.get_by_label("Query", exact=True)
            query.fill("why does dough rise")
            query.press("Enter")
            expect(page.get_by_text("1. Bread").first).to_be_visible(timeout=60_000)
            page.locator(".st-key-playground-version-left").click()  # the new version is live, first in the list
            expect(page.get_by_role("option", name=re.compile(r"kb-trivia-e2e · live"))).to_be_visible(timeout=30_000)
            page.keyboard.press("Escape")
            page.screenshot(path=str(artifacts / "3-playground.png"), full_page=True)
            assert page.outside == []  # page icons fetched favicons from fonts.gstatic.com on every page
        except Exception:
            page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
            raise


def test_evaluate_an_uploaded_labelled_set_in_a_browser(
    populated_home: Path, tiny_beir: Path, artifacts: Path, tmp_path: Path
) -> None:
    """The three file uploaders of the Evaluation page (which AppTest cannot drive) fed by the browser: the set is
    indexed, scored for BM25 and the base model, and the per-query comparison is shown."""
    from playwright.sync_api import expect

    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.engine import session_scope
    from ferret.core.settings import get_settings

    uploads = {
        "eval-corpus": tiny_beir / "corpus.jsonl",
        "eval-queries": tiny_beir / "queries.jsonl",
        "eval-qrels": tiny_beir / "qrels" / "test.tsv",
    }
    with running_admin(tmp_path / "admin.log") as url, browser_page(tmp_path / "chromium-profile") as page:
        try:
            page.goto(f"{url}/evaluation")
            expect(page.get_by_role("heading", name="Evaluation and versions")).to_be_visible(timeout=60_000)
            name = page.get_by_label("Set name (a corpus eval-<name> is created)")
            name.fill("trivia")
            name.press("Tab")
            for key, path in uploads.items():
                page.locator(f".st-key-{key} input[type=file]").set_input_files(str(path))
                chip = page.locator(f".st-key-{key}").get_by_test_id("stFileChipName")
                expect(chip).to_have_text(path.name, timeout=30_000)  # uploaded to the server
            page.get_by_role("button", name="Evaluate").click()
            verdict = page.get_by_text(re.compile(r"wins \d+ queries and loses \d+ against"))
            expect(verdict).to_be_visible(timeout=300_000)
            assert page.locator(".stAlert").filter(has_text="Upload queries.jsonl and the qrels TSV").count() == 0
            # The last system (the base model) against BM25, by each query's nDCG@10.
            pattern = r"base wins \d+ queries and loses \d+ against bm25s \(nDCG@10\); \d+ quer(y ties|ies tie)\."
            assert re.fullmatch(pattern, verdict.inner_text()), verdict.inner_text()
            verdict.scroll_into_view_if_needed()  # Streamlit scrolls inside its own container, not the page
            page.screenshot(path=str(artifacts / "4-evaluation-upload.png"))
        except Exception:
            page.screenshot(path=str(artifacts / "failure-upload.png"), full_page=True)
            raise
    with session_scope(get_settings().database_url) as session:
        corpus = get_corpus(session, "eval-trivia")  # the uploaded set, ingested by the admin process
        assert corpus.name == "eval-trivia"
