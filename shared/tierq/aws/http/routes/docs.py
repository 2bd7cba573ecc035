"""``GET /v1/openapi.json`` (this API's OpenAPI document, generated from every router) and
``GET /dashboard`` (the live dashboard page shipped in the package as
``tierq/dashboard/index.html``). Both are public: they serve static content only."""

from __future__ import annotations

from importlib import resources
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from tierq.aws.http.errors import error_responses, responses
from tierq.errors import NotFound

router = Router()

DASHBOARD = ("dashboard", "index.html")


@router.get(
    "/v1/openapi.json",
    summary="This document",
    operation_id="openapi",
    tags=["docs"],
    responses=responses("The OpenAPI document of every route."),
)
def openapi() -> dict[str, Any]:
    from tierq.aws.http.resolver import openapi_document

    return openapi_document()


def dashboard_html() -> str:
    page = resources.files("tierq").joinpath(*DASHBOARD)
    if not page.is_file():
        raise NotFound("the dashboard page is not installed (tierq/dashboard/index.html is "
                       "missing from the package)")
    return page.read_text(encoding="utf-8")


@router.get(
    "/dashboard",
    summary="Live queue dashboard (HTML)",
    operation_id="dashboard",
    tags=["docs"],
    responses={
        200: {"description": "The dashboard page.",
              "content": {"text/html": {"schema": {"type": "string"}}}},
        **error_responses(404),
    },
)
def dashboard() -> Response[str]:
    return Response(status_code=200, content_type="text/html; charset=utf-8",
                    body=dashboard_html(), headers={"Cache-Control": "no-cache"})
