"""The API's OpenAPI 3.1 document: ``python -m api.http.openapi > docs/openapi.json``.

tests/api/test_http.py fails when docs/openapi.json and the routes disagree.
"""

from __future__ import annotations

import json
from typing import Any

from api.http.app import create_app
from api.http.settings import ApiSettings

__all__ = ["openapi_document", "openapi_text"]


def openapi_document() -> dict[str, Any]:
    return create_app(ApiSettings(), None).openapi()


def openapi_text() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(openapi_text(), end="")
