"""IAM enforced on moto's S3 API: one user per identity, whose only policy is that identity's.

moto checks every request's action and resource against the caller's policies once told to
(`reset-auth`); it does not evaluate conditions (e.g. `s3:prefix` on ListBucket). It authorizes a
DeleteObjects batch as s3:DeleteObject on the bucket, where S3 authorizes each key ("For each
key, Amazon S3 performs a delete operation and returns the result", DeleteObjects in the S3 API
reference): PerKeyDeletes, in front of it, restores S3's rule.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlsplit
from xml.etree import ElementTree

import boto3
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from recording_proxy import RecordingProxy, Request, Response
from spotsafe.local.servers import LOCAL_AWS_ENV

REGION = LOCAL_AWS_ENV["AWS_DEFAULT_REGION"]
S3_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


def admin_client(endpoint: str, service: str = "s3"):
    """A client with the server's root credentials, for setting up before IAM is enforced."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=LOCAL_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def iam_users(endpoint: str, policies: dict[str, dict]) -> dict[str, dict[str, str]]:
    """Create a user per identity with its policy; return each one's access key as AWS_*
    environment variables."""
    iam = admin_client(endpoint, "iam")
    keys = {}
    for identity, policy in policies.items():
        iam.create_user(UserName=identity)
        iam.put_user_policy(
            UserName=identity, PolicyName=identity, PolicyDocument=json.dumps(policy)
        )
        key = iam.create_access_key(UserName=identity)["AccessKey"]
        keys[identity] = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": REGION,
        }
    return keys


def client_as(keys: dict[str, str], endpoint: str, service: str = "s3"):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=keys["AWS_DEFAULT_REGION"],
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
    )


def enforce_iam(endpoint: str) -> None:
    """From now on the server checks every request against the caller's policies."""
    requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=10).raise_for_status()


class PerKeyDeletes(RecordingProxy):
    """A recording proxy in front of moto that sends a DeleteObjects batch as one DeleteObject
    per key, signed with the caller's key, so moto authorizes each key as S3 does; the answer is
    DeleteObjects' own, a Deleted or an Error entry per key. Each key's delete is recorded."""

    def __init__(self, upstream: str, keys: dict[str, dict[str, str]]) -> None:
        super().__init__(upstream)
        self.keys = keys  # identity -> its AWS_* variables

    def answer(self, identity: str, request: Request) -> Response | None:
        url = urlsplit(request.path)
        if request.method != "POST" or "delete" not in parse_qs(url.query, keep_blank_values=True):
            return None
        bucket = url.path.strip("/")
        keys = [e.text for e in ElementTree.fromstring(request.body).iter() if _tag(e) == "Key"]
        result = ElementTree.Element("DeleteResult", xmlns=S3_XMLNS)
        for key in keys:
            single = self._signed_delete(identity, bucket, key)
            answer = self.forward(single)
            self.record(identity, single, answer)
            if answer.status in (200, 204):
                ElementTree.SubElement(ElementTree.SubElement(result, "Deleted"), "Key").text = key
            else:
                error = ElementTree.SubElement(result, "Error")
                for name, text in (("Key", key), *_code_and_message(answer.body)):
                    ElementTree.SubElement(error, name).text = text
        body = ElementTree.tostring(result, xml_declaration=True, encoding="UTF-8")
        return Response(200, {"content-type": "application/xml"}, body)

    def _signed_delete(self, identity: str, bucket: str, key: str) -> Request:
        keys = self.keys[identity]
        path = f"/{bucket}/{quote(key, safe='/')}"
        signed = AWSRequest(method="DELETE", url=f"http://{self.upstream.netloc}{path}")
        credentials = Credentials(keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"])
        S3SigV4Auth(credentials, "s3", keys["AWS_DEFAULT_REGION"]).add_auth(signed)
        headers = {k.lower(): v for k, v in signed.headers.items()}
        return Request("DELETE", path, {"host": self.upstream.netloc, **headers}, b"")


def _tag(element: ElementTree.Element) -> str:
    return element.tag.rsplit("}", 1)[-1]


def _code_and_message(body: bytes) -> list[tuple[str, str]]:
    error = {_tag(e): e.text or "" for e in ElementTree.fromstring(body).iter()}
    return [("Code", error.get("Code", "")), ("Message", error.get("Message", ""))]
