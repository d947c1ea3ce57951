"""Real-browser tests of the admin: Debian's ``chromium`` driven by Playwright (see ../shared/BROWSER.md).

Where chromium or Playwright is missing the tests skip, saying how to install them; with ``CI=true`` they
fail instead (``.ci/run`` installs chromium). Never ``playwright install``: it downloads a browser.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.test import override_settings

from queue_max_django import conf

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

TIMEOUT_MS = 15_000  # any one browser step
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing: `uv sync` installs it (dev dependency group)"
    if shutil.which("chromium") is None:
        return (
            "chromium is missing: install Debian's package as root, `apt-get update && apt-get install -y "
            "chromium` (never `playwright install`)"
        )
    return None


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    """Chromium, for one test. Playwright's sync API runs an event loop in this thread while it is open, so
    Django's ORM calls here (the test's own, the database teardown) need DJANGO_ALLOW_ASYNC_UNSAFE; it is set
    for this test only, and the loop ends with it (a session-wide browser would break the ORM calls of every
    later test). The live server answers from its own thread, unaffected."""
    reason = missing_browser()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests cannot run in CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS, timeout=TIMEOUT_MS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser tab, each step bounded by TIMEOUT_MS."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture
def store_settings(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """The test's own store, of the kind ``store_kind`` (tests/stores.py), for the test and for the live
    server's thread alike: LMDB in ``tmp_path``, or PostgreSQL in the test's database, by its URL (the live
    server's thread and the test share the process's queue, so no ``DATABASES`` alias is needed)."""
    store: dict[str, Any] = {"DATA_DIR": tmp_path / "store"}
    if store_kind == "postgres":
        store = {"STORE": "postgresql", "URL": request.getfixturevalue("pg_url")}
    conf.reset()
    with override_settings(QUEUE_MAX={**store, "RETRY_BACKOFF": 0}):
        yield
    conf.reset()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: ``$QUEUE_MAX_SCREENSHOTS`` when set (``docs/img`` refreshes the docs' images),
    else the test's temporary directory."""
    target = os.environ.get("QUEUE_MAX_SCREENSHOTS")
    folder = Path(target) if target else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
