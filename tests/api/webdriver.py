"""Debian's headless Chromium, driven by its chromedriver over the W3C WebDriver protocol (plain HTTP).

``apt-get install chromium chromium-driver`` (.ci/run does it); no browser
download, no client library: the protocol is a few JSON requests, made here
with httpx.  Chrome DevTools commands go through chromedriver's
``goog/cdp/execute`` (a viewport of an exact width, full-page screenshots,
downloads into a directory).
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = ["Browser", "chromium"]

_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


class Browser:
    """One WebDriver session: navigate, find, type, click, read, screenshot."""

    def __init__(self, client: httpx.AsyncClient, session: str) -> None:
        self._client = client
        self._base = f"/session/{session}"

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = await self._client.request(method, self._base + path, json=body)
        value = answer.json()["value"]
        if answer.status_code != 200:
            raise AssertionError(f"WebDriver {method} {path}: {value.get('error')}: {value.get('message')}")
        return value

    async def cdp(self, command: str, **params: object) -> Any:
        return await self._call("POST", "/goog/cdp/execute", {"cmd": command, "params": params})

    async def go(self, url: str) -> None:
        await self._call("POST", "/url", {"url": url})

    async def url(self) -> str:
        return str(await self._call("GET", "/url"))

    async def arrives_at(self, url: str, within: float = 30.0) -> str:
        """The page's URL once it is ``url``, or the last one seen after ``within`` seconds.

        A click that submits a form returns before the navigation it starts
        may have begun (chromedriver waits only for a load already under
        way), so reading the URL at once races the browser.
        """
        deadline = asyncio.get_running_loop().time() + within
        seen = await self.url()
        while seen != url and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
            seen = await self.url()
        return seen

    async def find(self, css: str) -> str:
        found = await self._call("POST", "/element", {"using": "css selector", "value": css})
        return str(found[_ELEMENT])

    async def type(self, css: str, text: str) -> None:
        await self._call("POST", f"/element/{await self.find(css)}/value", {"text": text})

    async def click(self, css: str) -> None:
        await self._call("POST", f"/element/{await self.find(css)}/click", {})

    async def text(self, css: str = "body") -> str:
        """The element's rendered text, as a reader sees it."""
        return str(await self._call("GET", f"/element/{await self.find(css)}/text"))

    async def source(self) -> str:
        return str(await self._call("GET", "/source"))

    async def script(self, script: str) -> Any:
        return await self._call("POST", "/execute/sync", {"script": script, "args": []})

    async def cookies(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._call("GET", "/cookie")
        return found

    async def screenshot(self, path: Path, width: int) -> None:
        """The whole page at a viewport ``width`` px wide, as PNG into ``path``."""
        await self.cdp(
            "Emulation.setDeviceMetricsOverride", width=width, height=800, deviceScaleFactor=1, mobile=False
        )
        shot = await self.cdp("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))


@asynccontextmanager
async def chromium(downloads: Path) -> AsyncIterator[Browser]:
    """A headless Chromium session, downloading into ``downloads``; both processes stopped on exit."""
    driver_path, browser_path = shutil.which("chromedriver"), shutil.which("chromium")
    if driver_path is None or browser_path is None:
        pytest.fail(
            "no chromium or chromedriver: apt-get install -y chromium chromium-driver (as .ci/run does)"
        )
    port = _free_port()
    driver = await asyncio.create_subprocess_exec(
        driver_path, f"--port={port}", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            for _ in range(300):  # chromedriver answers /status once it listens
                try:
                    if (await client.get("/status")).json()["value"]["ready"]:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            options = {
                "binary": browser_path,
                # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--hide-scrollbars",
                ],
                "prefs": {
                    "download.default_directory": str(downloads),
                    "download.prompt_for_download": False,
                },
            }
            capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
            created = await client.post("/session", json={"capabilities": capabilities})
            assert created.status_code == 200, created.text
            browser = Browser(client, created.json()["value"]["sessionId"])
            await browser.cdp("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
            try:
                yield browser
            finally:
                await client.delete(f"/session/{created.json()['value']['sessionId']}")
    finally:
        driver.terminate()
        await driver.wait()
