"""An export checked against its published schema (docs/schemas/<name>.schema.json, Draft 2020-12)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def published(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


def validate_export(name: str, document: Any) -> None:
    """Raise jsonschema.ValidationError when `document` is not what export `name` publishes."""
    jsonschema.validate(document, published(name), cls=jsonschema.Draft202012Validator)
