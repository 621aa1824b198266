"""Errors as HTTP answers: a user's mistake is one sentence in ``detail`` with the matching status.

``NotFoundError`` → 404, ``ForbiddenError`` → 403, ``ConflictError`` → 409, ``InvalidInputError`` → 422,
``UnavailableError`` → 503, any other ``FerretError`` → 400. The sentence is the error's ``for_http``: where the
CLI's sentence names a command, the API's names the route that does the same.
A request that does not match the schema gets 422 with one sentence about its first problem plus the full list.
Anything else is a bug: FastAPI's 500, with the traceback in the server log only.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ferret.api.schemas import ErrorOut
from ferret.core.errors import (
    ConflictError,
    FerretError,
    ForbiddenError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)

_STATUS: tuple[tuple[type[FerretError], int], ...] = (
    (NotFoundError, status.HTTP_404_NOT_FOUND),
    (ForbiddenError, status.HTTP_403_FORBIDDEN),
    (ConflictError, status.HTTP_409_CONFLICT),
    (InvalidInputError, status.HTTP_422_UNPROCESSABLE_CONTENT),
    (UnavailableError, status.HTTP_503_SERVICE_UNAVAILABLE),
)


def status_of(error: FerretError) -> int:
    for kind, code in _STATUS:
        if isinstance(error, kind):
            return code
    return status.HTTP_400_BAD_REQUEST


def _location(loc: Any) -> str:
    return ".".join(str(part) for part in loc) or "the request"


def describe_validation(errors: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """One sentence about the first problem, and every problem as location, message and type (no echoed input)."""
    problems = [
        {
            "loc": [str(part) for part in error.get("loc", ())],
            "msg": str(error.get("msg", "")),
            "type": error.get("type"),
        }
        for error in errors
    ]
    if not problems:
        return "The request is not valid.", problems
    first = problems[0]
    if first["type"] == "json_invalid":  # its location is a character offset, not a field
        where = f" at character {first['loc'][-1]}" if len(first["loc"]) > 1 else ""
        return f"The request body is not valid JSON{where}; send a JSON object.", problems
    if first["type"] == "model_attributes_type" and first["loc"] == ["body"]:  # no JSON object came
        return "The request body must be a JSON object, sent with 'Content-Type: application/json'.", problems
    message = str(first["msg"]).rstrip(".")
    more = f" (and {len(problems) - 1} more problem{'s' * (len(problems) > 2)})" if len(problems) > 1 else ""
    return f"The request is not valid at '{_location(first['loc'])}': {message}{more}.", problems


async def _ferret_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FerretError)
    return JSONResponse(ErrorOut(detail=exc.for_http).model_dump(exclude_none=True), status_code=status_of(exc))


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    detail, problems = describe_validation(list(exc.errors()))
    return JSONResponse(
        ErrorOut(detail=detail, errors=problems).model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(FerretError, _ferret_error)
    app.add_exception_handler(RequestValidationError, _validation_error)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer, all with ``ErrorOut``."""
    descriptions = {
        400: "Bad request.",
        401: "Missing, unknown or revoked API key.",
        403: "The API key lacks the scope this route needs.",
        404: "The named corpus, task, job or index version does not exist.",
        409: "The request contradicts the current state.",
        413: "The body or the batch is larger than the server's limit.",
        422: "The request does not match the schema, or its values cannot be used.",
        503: "An index version cannot be loaded and no earlier one can serve; the detail names the repair command.",
    }
    return {code: {"model": ErrorOut, "description": descriptions[code]} for code in codes}
