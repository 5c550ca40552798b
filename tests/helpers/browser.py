"""A headless chromium under selenium for the pages' tests (skips where it is missing)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


CHROMEDRIVER = shutil.which("chromedriver")


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium "
                             "chromium-driver); the HTML grid is not tested in a browser")


def chromium_flags(profile: Path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}"]


def browser(tmp_path: Path) -> Any:
    """A headless chromium under selenium (1400x900, its profile in ``tmp_path``); skips
    where chromium, chromedriver or selenium is missing. The caller quits it."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromedriver not installed (apt-get install -y chromium "
                    "chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*chromium_flags(tmp_path / "profile"), "--window-size=1400,900"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
