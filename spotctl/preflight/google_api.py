"""Read-only calls to Google's REST APIs with the operator's Application Default Credentials (the
ones `pulumi up` uses): GET only, JSON in and out. `root` points every API at one server instead
of `https://<api>.googleapis.com` (a test's loopback fake)."""

from __future__ import annotations

from spotctl.preflight.rows import PreflightError

SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class ApiError(Exception):
    """A Google API's error answer: its HTTP status, status name and message."""

    def __init__(self, call: str, status: int, reason: str, message: str) -> None:
        super().__init__(f"{call}: {status} {reason}: {message}")
        self.call, self.status, self.reason, self.message = call, status, reason, message


class GoogleApi:
    def __init__(self, session, root: str | None = None) -> None:
        self.session, self.root = session, root
        self.calls: list[str] = []  # "GET <api>/<path>", in the order made

    @classmethod
    def with_default_credentials(cls, project: str, root: str | None = None) -> GoogleApi:
        """ADC, billed to the stack's project; no credentials is one PreflightError line."""
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=[SCOPE], quota_project_id=project)
        except DefaultCredentialsError:
            raise PreflightError(
                "no Google credentials: `gcloud auth application-default login`, then "
                f"`gcloud auth application-default set-quota-project {project}`"
            ) from None
        return cls(AuthorizedSession(credentials), root)

    def get(self, api: str, path: str, **params: str) -> dict:
        from google.auth.exceptions import GoogleAuthError
        from requests import RequestException

        url = (
            f"https://{api}.googleapis.com/{path}"
            if self.root is None
            else f"{self.root}/{api}/{path}"
        )
        call = f"GET {api}.googleapis.com/{path}"
        self.calls.append(call)
        try:
            response = self.session.get(url, params=params or None, timeout=30)
        except GoogleAuthError as exc:
            raise PreflightError(f"Google refuses these credentials: {_first_line(exc)}") from None
        except RequestException as exc:
            raise PreflightError(f"cannot reach {api}.googleapis.com: {_first_line(exc)}") from None
        if response.ok:
            return response.json()
        try:
            error = response.json()["error"]
            reason, message = error.get("status", ""), error.get("message", "")
        except (ValueError, KeyError, TypeError):
            reason, message = response.reason, response.text[:200]
        raise ApiError(call, response.status_code, reason, _first_line(message))


def _first_line(text) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""
