"""The errors `serve` answers with, in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from starlette.responses import JSONResponse

INVALID = "invalid_request_error"


class ApiError(Exception):
    """An HTTP error answer. `param` names the request field at fault (OpenAI's `param`), None when no one field is;
    `code` is the HTTP status, as llama-server sends it."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = INVALID,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.headers = headers or {}

    def body(self) -> dict[str, dict[str, object]]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None = None) -> ApiError:
    """A 400 for a request the client must change."""
    return ApiError(400, message, INVALID, param=param)
