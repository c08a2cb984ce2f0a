"""`snapview.upload("s3://...")`: the server fetches the snapshot from a real S3 server (s3s-fs,
started by `.ci/services up`) with its own credentials, as `snapview upload s3://...` does."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import secrets
import urllib.parse
import urllib.request

import pytest
import snapview
from conftest import FIXTURES

SMALL = FIXTURES / "mlp_small.pickle"

NEEDED = (
    "SNAPVIEW_TEST_BLOBS",
    "AWS_ENDPOINT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)


def s3_put(name: str, body: bytes) -> str:
    """Puts `body` under a fresh key of the test bucket (one signed PUT, AWS signature version
    4, path style as the server's AWS_ENDPOINT takes it) and returns its s3:// URL."""
    missing = [name for name in NEEDED if not os.environ.get(name)]
    assert not missing, (
        f'{", ".join(missing)} not set: run `eval "$(bash .ci/services up)"` first '
        "(.ci/services up starts the S3 server these tests need)"
    )
    blobs = os.environ["SNAPVIEW_TEST_BLOBS"]
    assert blobs.startswith("s3://"), f"SNAPVIEW_TEST_BLOBS={blobs} is not s3://bucket/prefix"
    bucket, _, prefix = blobs[len("s3://") :].partition("/")
    key = "/".join(p for p in (prefix.strip("/"), f"import-{secrets.token_hex(8)}", name) if p)
    endpoint = os.environ["AWS_ENDPOINT"].rstrip("/")
    region = os.environ.get("AWS_REGION", "us-east-1")
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host = urllib.parse.urlsplit(endpoint).netloc
    path = "/" + bucket + "/" + urllib.parse.quote(key, safe="/-_.~")
    payload = hashlib.sha256(body).hexdigest()
    signed_headers = "host;x-amz-content-sha256;x-amz-date"
    canonical = "\n".join(
        [
            "PUT",
            path,
            "",
            f"host:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\n",
            signed_headers,
            payload,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    signing_key = ("AWS4" + os.environ["AWS_SECRET_ACCESS_KEY"]).encode()
    for part in (day, region, "s3", "aws4_request"):
        signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        endpoint + path,
        data=body,
        method="PUT",
        headers={
            "x-amz-date": amz_date,
            "x-amz-content-sha256": payload,
            "Authorization": (
                f"AWS4-HMAC-SHA256 Credential={os.environ['AWS_ACCESS_KEY_ID']}/{scope}, "
                f"SignedHeaders={signed_headers}, Signature={signature}"
            ),
        },
    )
    with urllib.request.urlopen(request, timeout=30):
        pass
    return f"s3://{bucket}/{key}"


def test_upload_of_an_s3_url_is_fetched_by_the_server(server) -> None:
    source = s3_put("mlp_small.pickle", SMALL.read_bytes())
    url = snapview.upload(source, server=server.url, group="job7")
    assert url.startswith(server.url + "/s/")
    snapshot = url.rstrip("/").rsplit("/", 1)[-1]
    with urllib.request.urlopen(f"{server.url}/api/snapshots/{snapshot}", timeout=30) as answer:
        stored = json.load(answer)
    assert stored["name"] == "mlp_small" and stored["group"] == "job7"
    # The same object again is the snapshot stored already.
    assert snapview.upload(source, server=server.url) == url


def test_upload_of_a_missing_or_refused_url_says_why(server) -> None:
    missing = s3_put("here.pickle", SMALL.read_bytes()).rsplit("/", 1)[0] + "/missing.pickle"
    with pytest.raises(snapview.SnapviewError, match=f"no such object {missing}") as error:
        snapview.upload(missing, server=server.url)
    assert error.value.exit_status == snapview.EXIT_NOT_FOUND
    with pytest.raises(snapview.SnapviewError, match="allows no https:// imports"):
        snapview.upload("https://example.com/x.pickle", server=server.url)
    with pytest.raises(snapview.SnapviewError, match="plain http://"):
        snapview.upload("http://example.com/x.pickle", server=server.url)
