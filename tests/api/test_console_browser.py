"""The console in a real browser (Debian's headless Chromium): log in, read, download, screenshots.

An auditor logs in through the form, reads the queues page and a pending
gang's explain page, and downloads the preemption audit's CSV by its link.
Screenshots of both pages at 1280 and 800 px wide are kept as test artifacts
in ``tests/artifacts/console/`` (not committed; the test prints the paths).
"""

from __future__ import annotations

import re
from pathlib import Path

from api.demo_manifests import CLUSTER, URGENT, WORKLOADS
from api.endpoints import Endpoints
from api.http.console import CSRF_COOKIE, TOKEN_COOKIE
from api.http.settings import ApiSettings
from api.http.tokens import Role, create_token
from events.topics import Topics
from tests.api.helpers import live_stack
from tests.api.test_console import preempted, running, submit
from tests.api.test_http import served
from tests.api.webdriver import Browser, chromium

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"
WIDTHS = (1280, 800)
PNG = b"\x89PNG\r\n\x1a\n"


async def screenshots(browser: Browser, name: str) -> list[Path]:
    """The page at each width, saved as ``<name>-<width>.png``; their paths."""
    paths = []
    for width in WIDTHS:
        path = ARTIFACTS / f"{name}-{width}.png"
        await browser.screenshot(path, width)
        assert path.read_bytes().startswith(PNG)
        # Nothing wider than the viewport: the page reflows rather than scrolling sideways.
        overflow = await browser.script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} at {width} px is {overflow} px wider than the window"
        paths.append(path)
    return paths


async def test_an_auditor_logs_in_reads_the_queues_and_an_explanation_and_downloads_the_audit(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    tokens = tmp_path / "tokens.json"
    auditor, _ = create_token(tokens, subject="auditor-1", role=Role.AUDITOR)
    admin = {"authorization": f"Bearer {create_token(tokens, subject='ops', role=Role.ADMIN)[0]}"}
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    async with live_stack(endpoints), served(endpoints, ApiSettings(api_tokens_file=tokens)) as api:
        api.headers.update(admin)
        for text in (CLUSTER, WORKLOADS):
            await submit(api, text)
        await running(api, "default/demo-training")
        await submit(api, URGENT)
        await preempted(api)
        url = str(api.base_url).rstrip("/")
        explained = (await api.get("/v1/jobs/default/llm-pretrain/explain")).json()

        async with chromium(downloads) as browser:
            # Not logged in: the form. Logged in: the token in an HttpOnly cookie no script reads.
            await browser.go(f"{url}/")
            assert await browser.url() == f"{url}/login"
            await browser.type("input[name=token]", auditor)
            await browser.click("form.login button")
            assert await browser.arrives_at(f"{url}/") == f"{url}/"
            cookies = {c["name"]: c for c in await browser.cookies()}
            assert cookies[TOKEN_COOKIE]["httpOnly"]
            assert cookies[TOKEN_COOKIE]["sameSite"] == "Strict"
            assert cookies[CSRF_COOKIE]["httpOnly"]
            assert TOKEN_COOKIE not in await browser.script("return document.cookie")

            queues = await browser.text()
            assert "auditor-1 (auditor)" in queues
            for q in (await api.get("/v1/queues")).json()["items"]:
                assert q["name"] in queues
            assert not re.search(r"memory \d{7,}", queues), queues  # bytes in binary units (192Gi)
            shots = await screenshots(browser, "queues")

            await browser.go(f"{url}/jobs/default/llm-pretrain")
            page = await browser.text()
            assert "Why (replay explain)" in page
            for reason in explained["reasons"]:
                assert reason["code"] in page
            for change in explained["counterfactual"]["changes"]:
                assert change["summary"] in page
            shots += await screenshots(browser, "job-explain")

            # The audit page's download link: the CSV the API answers, saved by the browser.
            await browser.go(f"{url}/audit")
            assert "default/urgent-train" in await browser.text()
            await browser.click("a.download")
            saved = downloads / "preemptions.csv"
            for _ in range(300):
                if saved.exists():
                    break
                await browser.script("return 1")  # a round trip to the browser while it saves
            api_csv = await api.get("/v1/audit/preemptions", headers={"accept": "text/csv"})
            assert saved.read_text(encoding="utf-8") == api_csv.text

    print("console screenshots:", *shots, sep="\n  ")
