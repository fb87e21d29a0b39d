"""Headless Chromium for the report's browser tests.

Debian's chromium (/usr/bin/chromium) driven by the playwright Python package; set up with
`bash scripts/setup-chromium.sh` (never `playwright install`). Without chromium the tests skip,
except under CI=true, where they fail: CI must not pass by silently not running them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SETUP = "bash scripts/setup-chromium.sh"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _unavailable(why: str) -> None:
    msg = f"{why}; run `{SETUP}`"
    if _in_ci():
        pytest.fail(f"browser tests cannot run under CI=true: {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = os.environ.get("SERVESCOPE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        _unavailable("chromium not found")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright Python package is not installed")
    return path


class OfflinePage:
    """A page in a fresh, offline context that records console errors and every request."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.requests: list[str] = []
        self.blocked: list[str] = []
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))


@pytest.fixture
def offline_page(chromium_path: str, tmp_path: Path) -> Iterator[OfflinePage]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            user_data_dir=str(tmp_path / "chromium-profile"),  # a new, empty profile every test
            executable_path=chromium_path,
            args=CHROMIUM_ARGS,
            headless=True,
            offline=True,
            viewport={"width": 1400, "height": 1000},
            java_script_enabled=True,  # on, so an injected script WOULD run if the report let it
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(20_000)
            wrapped = OfflinePage(page)

            def route(r: Any) -> None:
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:
                    wrapped.blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            yield wrapped
        finally:
            context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
