"""The served OpenAPI document is valid OpenAPI and covers every route of template.yaml.
That it is also true — what it allows is accepted, what it forbids refused, every response
as documented — is shown by schemathesis in test_openapi_contract.py."""

from __future__ import annotations

import httpx
import pytest
from openapi_spec_validator import validate

from tierq.local.gateway.template import Template

pytestmark = pytest.mark.e2e


def test_served_document_is_valid_openapi_covering_every_route(base_url: str) -> None:
    from tests.handlers.support import REPO

    document = httpx.get(f"{base_url}/v1/openapi.json").json()
    validate(document)
    served = {(m.upper(), p) for p, item in document["paths"].items() for m in item
              if m in ("get", "put", "post", "delete", "patch")}
    template = Template.load(REPO / "template.yaml")
    assert served == {(r.method, r.path) for r in template.routes}
