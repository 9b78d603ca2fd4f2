"""Cloud Storage's IAM in front of fake-gcs-server, which checks no permission at all.

Each JSON-API request (and the upload and download media paths the client library uses) is
mapped to the IAM permissions it needs and the resource they are checked on, after Google's
table (cloud.google.com/storage/docs/access-control/iam-json) and the methods' pages
(objects/insert: "storage.objects.delete ... to overwrite the existing object"). The bucket's
policy comes from a preview: each BucketIAMMember's role, its permissions from the custom role,
and its IAM Condition, evaluated as CEL with the attributes IAM gives Cloud Storage
(cloud.google.com/iam/docs/conditions-resource-attributes): `resource.name`
`projects/_/buckets/B[/objects/O]`, `resource.type` `storage.googleapis.com/Bucket|Object`,
`resource.service`, and `api.getAttribute("storage.googleapis.com/objectListPrefix", default)`
on listings. A condition that fails to evaluate grants nothing, as in IAM.

A refusal is GCS's own 403 JSON body, naming the caller and the permission. A request the layer
cannot map is answered 501, so a test sees it instead of it passing unchecked. A resumable
upload's session URI is the permission to send its chunks, as on GCS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import BytesParser
from urllib.parse import parse_qs, quote, unquote, urlsplit

import cel
from recording_proxy import RecordingProxy, Request, Response

BUCKET_TYPE = "storage.googleapis.com/Bucket"
OBJECT_TYPE = "storage.googleapis.com/Object"
LIST_PREFIX = "storage.googleapis.com/objectListPrefix"
_PATH = re.compile(r"^/(?P<api>upload/|download/)?storage/v1/b(?:/(?P<bucket>[^/]+))?(?P<rest>.*)$")


@dataclass(frozen=True)
class Check:
    """One permission on one resource, as IAM evaluates it."""

    permission: str
    bucket: str
    object: str | None = None  # None: the bucket itself
    list_prefix: str | None = None  # objects.list only

    @property
    def resource(self) -> str:
        name = f"projects/_/buckets/{self.bucket}"
        return name if self.object is None else f"{name}/objects/{self.object}"

    @property
    def type(self) -> str:
        return BUCKET_TYPE if self.object is None else OBJECT_TYPE


@dataclass(frozen=True)
class Binding:
    permissions: frozenset[str]
    condition: str | None

    def grants(self, check: Check) -> bool:
        if check.permission not in self.permissions:
            return False
        if self.condition is None:
            return True
        context = cel.Context()
        context.add_variable(
            "resource",
            {"name": check.resource, "type": check.type, "service": "storage.googleapis.com"},
        )
        context.add_variable("api", {})
        attributes = {} if check.list_prefix is None else {LIST_PREFIX: check.list_prefix}

        def get_attribute(_api: dict, key: str, fallback: str) -> str:
            return attributes.get(key, fallback)

        context.add_function("getAttribute", get_attribute)
        try:
            return cel.evaluate(self.condition, context) is True
        except (RuntimeError, ValueError):
            return False


class BucketPolicy:
    """The IAM policy of one bucket: bindings per member."""

    def __init__(self, bucket: str, bindings: dict[str, list[Binding]]) -> None:
        self.bucket = bucket
        self.bindings = bindings

    @classmethod
    def from_preview(cls, resources: list, bucket: str) -> BucketPolicy:
        """The bindings previewed resources grant on `bucket` with the roles they define."""
        roles = {
            r.outputs["name"]: frozenset(r.inputs["permissions"])
            for r in resources
            if r.type == "gcp:projects/iAMCustomRole:IAMCustomRole"
        }
        bindings: dict[str, list[Binding]] = {}
        for member in resources:
            inputs = member.inputs
            if member.type != "gcp:storage/bucketIAMMember:BucketIAMMember":
                continue
            if inputs["bucket"] != bucket or inputs["role"] not in roles:
                continue
            condition = (inputs.get("condition") or {}).get("expression")
            bindings.setdefault(inputs["member"], []).append(
                Binding(roles[inputs["role"]], condition)
            )
        return cls(bucket, bindings)

    def allows(self, member: str, check: Check) -> bool:
        return any(b.grants(check) for b in self.bindings.get(member, []))


def checks_for(request: Request, object_exists: Callable[[str, str], bool]) -> list[Check] | None:
    """What `request` needs; None when the layer does not know the request.

    object_exists(bucket, name) says whether an upload would overwrite.
    """
    url = urlsplit(request.path)
    query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    match = _PATH.match(url.path)
    if not match:
        return None
    api, bucket, rest = match["api"] or "", unquote(match["bucket"] or ""), match["rest"]
    method = request.method
    if not bucket:
        return [Check("storage.buckets.create" if method == "POST" else "storage.buckets.list", "")]
    if api == "upload/" and rest == "/o" and method == "POST":
        name = query.get("name") or _upload_name(request)
        needed = [Check("storage.objects.create", bucket, name)]
        if query.get("ifGenerationMatch") != "0" and object_exists(bucket, name):
            needed.append(Check("storage.objects.delete", bucket, name))
        return needed
    if rest in ("", "/"):
        return {
            "GET": [Check("storage.buckets.get", bucket)],
            "DELETE": [Check("storage.buckets.delete", bucket)],
            "PATCH": [Check("storage.buckets.update", bucket)],
            "PUT": [Check("storage.buckets.update", bucket)],
        }.get(method)
    if rest == "/iam":
        permission = "getIamPolicy" if method == "GET" else "setIamPolicy"
        return [Check(f"storage.buckets.{permission}", bucket)]
    if rest == "/o" and method == "GET":
        return [Check("storage.objects.list", bucket, list_prefix=query.get("prefix", ""))]
    if rest.startswith("/o/") and "/" not in rest[3:]:
        name = unquote(rest[3:])
        permission = {
            "GET": "storage.objects.get",
            "DELETE": "storage.objects.delete",
            "PATCH": "storage.objects.update",
            "PUT": "storage.objects.update",
        }.get(method)
        return None if permission is None else [Check(permission, bucket, name)]
    return None


def _upload_name(request: Request) -> str:
    """The object name of a multipart or resumable upload: in its metadata part or body."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/"):
        head = f"Content-Type: {content_type}\r\n\r\n".encode()
        message = BytesParser().parsebytes(head + request.body)
        return json.loads(message.get_payload()[0].get_payload(decode=True))["name"]
    return json.loads(request.body or b"{}").get("name", "")


def denial(identity: str, check: Check) -> Response:
    """GCS's 403, word for word in its shape."""
    email = identity.split(":", 1)[-1]
    what = "bucket" if check.object is None else "object"
    message = (
        f"{email} does not have {check.permission} access to the Google Cloud Storage {what}. "
        f"Permission '{check.permission}' denied on resource (or it may not exist)."
    )
    error = {"domain": "global", "reason": "forbidden", "message": message}
    body = {"error": {"code": 403, "message": message, "errors": [error]}}
    return Response(403, {"content-type": "application/json; charset=UTF-8"}, _json(body))


def _json(body: dict) -> bytes:
    return json.dumps(body).encode()


class GcsPermissionLayer(RecordingProxy):
    """fake-gcs-server behind the IAM of one bucket. `listen(member)` gives the endpoint a
    client uses as that member (e.g. `serviceAccount:vision@p.iam.gserviceaccount.com`)."""

    def __init__(self, upstream: str, policy: BucketPolicy) -> None:
        super().__init__(upstream)
        self.policy = policy
        self._sessions: set[str] = set()  # upload ids this layer admitted

    def answer(self, identity: str, request: Request) -> Response | None:
        query = parse_qs(urlsplit(request.path).query)
        if "upload_id" in query:  # a chunk (or cancel) of a session: its URI is the grant
            if query["upload_id"][0] in self._sessions:
                return None
            return _not_found("No such upload session")
        checks = checks_for(request, self._exists)
        if checks is None:
            body = {"error": {"code": 501, "message": f"unmapped: {request.method} {request.path}"}}
            return Response(501, {"content-type": "application/json"}, _json(body))
        refused = next((c for c in checks if not self.policy.allows(identity, c)), None)
        return None if refused is None else denial(identity, refused)

    def forwarded(self, identity: str, request: Request, response: Response) -> Response:
        """Session URIs point back here, and the layer remembers the sessions it opened."""
        location = response.headers.get("location")
        if not location:
            return response
        moved = urlsplit(location)
        self._sessions.update(parse_qs(moved.query).get("upload_id", []))
        here = urlsplit(self.endpoints[identity])
        headers = {**response.headers, "location": moved._replace(netloc=here.netloc).geturl()}
        return Response(response.status, headers, response.body)

    def _exists(self, bucket: str, name: str) -> bool:
        path = f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        return self.forward(Request("GET", path, {"host": self.upstream.netloc}, b"")).status == 200


def _not_found(message: str) -> Response:
    body = {"error": {"code": 404, "message": message}}
    return Response(404, {"content-type": "application/json"}, _json(body))
