#!/usr/bin/env python3
"""somnus's S3 gateway driven by real S3 clients: boto3 and the AWS CLI.

Run by crates/cli/tests/s3_gateway.rs against a gateway in front of a real cluster.
Environment: S3_ENDPOINT (http://host:port), S3_ACCESS_KEY, S3_SECRET_KEY, and S3_SUITE
= full (default) or quick (the core operations, for a run while gear groups sleep).
Prints one line per check and `N checks, M failed`; exits 0 only if every check passed.
"""

import base64
import hashlib
import hmac
from http.client import HTTPConnection
import os
import secrets
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]
ACCESS = os.environ["S3_ACCESS_KEY"]
SECRET = os.environ["S3_SECRET_KEY"]
SUITE = os.environ.get("S3_SUITE", "full")
MIB = 1 << 20
RUN = secrets.token_hex(4)


def client(access=ACCESS, secret=SECRET, signature="s3v4"):
    config = Config(
        s3={"addressing_style": "path"},
        signature_version=signature,
        connect_timeout=30,
        read_timeout=60,
        retries={"max_attempts": 1},
    )
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=config,
    )


S3 = client()
checks, failures = [], []


def check(name, quick=False):
    def register(fn):
        checks.append((name, quick, fn))
        return fn

    return register


def expect_error(code, status, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ClientError as error:
        got_code = error.response["Error"].get("Code")
        got_status = error.response["ResponseMetadata"]["HTTPStatusCode"]
        assert (got_code, got_status) == (code, status) or (
            code is None and got_status == status
        ), f"expected {code} {status}, got {got_code} {got_status}"
        return
    raise AssertionError(f"expected {code} {status}, the call succeeded")


def md5_hex(data):
    return hashlib.md5(data).hexdigest()


def bucket(tag):
    name = f"t-{RUN}-{tag}"
    S3.create_bucket(Bucket=name)
    return name


def empty_and_delete(name):
    for page in S3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for item in page.get("Contents", []):
            S3.delete_object(Bucket=name, Key=item["Key"])
    for upload in S3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        S3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    S3.delete_bucket(Bucket=name)


def data(n, seed=1):
    # Deterministic, incompressible enough, cheap.
    block = hashlib.sha256(f"{seed}".encode()).digest() * 2048
    return (block * (n // len(block) + 1))[:n]


# ---- buckets ------------------------------------------------------------------------


@check("bucket create, head, list, location, delete", quick=True)
def _():
    name = bucket("b")
    S3.head_bucket(Bucket=name)
    listed = [b for b in S3.list_buckets()["Buckets"] if b["Name"] == name]
    assert len(listed) == 1 and "CreationDate" in listed[0], listed
    assert S3.get_bucket_location(Bucket=name).get("LocationConstraint") in (None, "")
    expect_error("BucketAlreadyOwnedByYou", 409, S3.create_bucket, Bucket=name)
    S3.delete_bucket(Bucket=name)
    expect_error(None, 404, S3.head_bucket, Bucket=name)
    expect_error("NoSuchBucket", 404, S3.delete_bucket, Bucket=name)


@check("bucket names are validated; a non-empty bucket is not deleted")
def _():
    expect_error("InvalidBucketName", 400, S3.create_bucket, Bucket="Bad_Name")
    name = bucket("ne")
    S3.put_object(Bucket=name, Key="k", Body=b"x")
    expect_error("BucketNotEmpty", 409, S3.delete_bucket, Bucket=name)
    empty_and_delete(name)


# ---- objects ------------------------------------------------------------------------


@check("put and get: bytes, ETag, content type, user metadata", quick=True)
def _():
    name = bucket("o")
    body = data(100_000)
    put = S3.put_object(
        Bucket=name, Key="dir/a.txt", Body=body, ContentType="text/plain",
        Metadata={"colour": "blue", "n": "7"},
    )
    assert put["ETag"] == f'"{md5_hex(body)}"', put["ETag"]
    got = S3.get_object(Bucket=name, Key="dir/a.txt")
    assert got["Body"].read() == body
    assert got["ETag"] == put["ETag"] and got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"colour": "blue", "n": "7"}, got["Metadata"]
    head = S3.head_object(Bucket=name, Key="dir/a.txt")
    assert head["ContentLength"] == len(body) and head["Metadata"]["colour"] == "blue"
    empty_and_delete(name)


@check("empty object, overwrite, missing key and bucket", quick=True)
def _():
    name = bucket("e")
    S3.put_object(Bucket=name, Key="empty", Body=b"")
    got = S3.get_object(Bucket=name, Key="empty")
    assert got["Body"].read() == b"" and got["ETag"] == f'"{md5_hex(b"")}"'
    S3.put_object(Bucket=name, Key="k", Body=b"first")
    S3.put_object(Bucket=name, Key="k", Body=b"second, longer")
    assert S3.get_object(Bucket=name, Key="k")["Body"].read() == b"second, longer"
    expect_error("NoSuchKey", 404, S3.get_object, Bucket=name, Key="missing")
    expect_error(None, 404, S3.head_object, Bucket=name, Key="missing")
    expect_error("NoSuchBucket", 404, S3.get_object, Bucket=f"t-{RUN}-none", Key="k")
    expect_error("NoSuchBucket", 404, S3.put_object, Bucket=f"t-{RUN}-none", Key="k", Body=b"x")
    empty_and_delete(name)


@check("Content-MD5: right accepted, wrong refused with nothing changed")
def _():
    name = bucket("m")
    body = b"payload"
    good = base64.b64encode(hashlib.md5(body).digest()).decode()
    S3.put_object(Bucket=name, Key="k", Body=body, ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    expect_error("BadDigest", 400, S3.put_object, Bucket=name, Key="k", Body=b"new", ContentMD5=bad)
    assert S3.get_object(Bucket=name, Key="k")["Body"].read() == body
    empty_and_delete(name)


@check("delete is idempotent; multi-object delete, quiet too", quick=True)
def _():
    name = bucket("d")
    for key in ["a", "b", "c"]:
        S3.put_object(Bucket=name, Key=key, Body=key.encode())
    S3.delete_object(Bucket=name, Key="a")
    S3.delete_object(Bucket=name, Key="a")
    answer = S3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "b"}, {"Key": "zz"}]})
    assert sorted(d["Key"] for d in answer["Deleted"]) == ["b", "zz"], answer
    answer = S3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "c"}], "Quiet": True})
    assert not answer.get("Deleted") and not answer.get("Errors"), answer
    assert S3.list_objects_v2(Bucket=name)["KeyCount"] == 0
    S3.delete_bucket(Bucket=name)


@check("keys: 1024 bytes stored, 1025 refused; unicode and odd characters")
def _():
    name = bucket("k")
    long_key = "k" * 1024
    S3.put_object(Bucket=name, Key=long_key, Body=b"long")
    assert S3.get_object(Bucket=name, Key=long_key)["Body"].read() == b"long"
    expect_error("KeyTooLongError", 400, S3.put_object, Bucket=name, Key="k" * 1025, Body=b"x")
    for key in ["ключ", "a b+c", "../../etc/passwd", "x?y=1&z#w"]:
        S3.put_object(Bucket=name, Key=key, Body=key.encode())
        assert S3.get_object(Bucket=name, Key=key)["Body"].read() == key.encode(), key
    empty_and_delete(name)


# ---- ranges and conditions ----------------------------------------------------------


@check("range reads across the 1 MiB request boundary, suffix, open, past the end", quick=True)
def _():
    name = bucket("r")
    body = data(3 * MIB + 123)
    S3.put_object(Bucket=name, Key="big", Body=body)
    for spec, want in [
        ("bytes=0-0", body[0:1]),
        ("bytes=1048570-1048590", body[1048570:1048591]),
        ("bytes=2097100-3145800", body[2097100:3145801]),
        ("bytes=-10", body[-10:]),
        (f"bytes={len(body) - 5}-", body[-5:]),
    ]:
        got = S3.get_object(Bucket=name, Key="big", Range=spec)
        assert got["Body"].read() == want, spec
        assert got["ContentRange"].endswith(f"/{len(body)}"), got["ContentRange"]
    got = S3.get_object(Bucket=name, Key="big", Range="bytes=10-19")
    assert got["ContentRange"] == f"bytes 10-19/{len(body)}", got["ContentRange"]
    expect_error("InvalidRange", 416, S3.get_object, Bucket=name, Key="big",
                 Range=f"bytes={len(body) + 10}-")
    empty_and_delete(name)


@check("conditional GET and HEAD")
def _():
    name = bucket("c")
    etag = S3.put_object(Bucket=name, Key="k", Body=b"abc")["ETag"]
    S3.get_object(Bucket=name, Key="k", IfMatch=etag)
    expect_error("PreconditionFailed", 412, S3.get_object, Bucket=name, Key="k", IfMatch='"0000"')
    expect_error(None, 304, S3.get_object, Bucket=name, Key="k", IfNoneMatch=etag)
    S3.get_object(Bucket=name, Key="k", IfNoneMatch='"0000"')
    future = datetime.now(timezone.utc) + timedelta(days=1)
    past = datetime.now(timezone.utc) - timedelta(days=1)
    expect_error(None, 304, S3.get_object, Bucket=name, Key="k", IfModifiedSince=future)
    S3.get_object(Bucket=name, Key="k", IfModifiedSince=past)
    expect_error("PreconditionFailed", 412, S3.get_object, Bucket=name, Key="k",
                 IfUnmodifiedSince=past)
    expect_error(None, 412, S3.head_object, Bucket=name, Key="k", IfMatch='"0000"')
    empty_and_delete(name)


# ---- copy ---------------------------------------------------------------------------


@check("copy: metadata copied or replaced; a missing source refused")
def _():
    name = bucket("cp")
    put = S3.put_object(Bucket=name, Key="src", Body=b"source", ContentType="text/x",
                        Metadata={"a": "1"})
    copied = S3.copy_object(Bucket=name, Key="dst", CopySource={"Bucket": name, "Key": "src"})
    assert copied["CopyObjectResult"]["ETag"] == put["ETag"]
    head = S3.head_object(Bucket=name, Key="dst")
    assert head["Metadata"] == {"a": "1"} and head["ContentType"] == "text/x", head
    S3.copy_object(Bucket=name, Key="dst2", CopySource={"Bucket": name, "Key": "src"},
                   MetadataDirective="REPLACE", ContentType="text/y", Metadata={"b": "2"})
    head = S3.head_object(Bucket=name, Key="dst2")
    assert head["Metadata"] == {"b": "2"} and head["ContentType"] == "text/y", head
    assert S3.get_object(Bucket=name, Key="dst2")["Body"].read() == b"source"
    expect_error("NoSuchKey", 404, S3.copy_object, Bucket=name, Key="x",
                 CopySource={"Bucket": name, "Key": "missing"})
    empty_and_delete(name)


# ---- listings -----------------------------------------------------------------------


KEYS = ["a", "a/b", "a/c/d", "a0", "b", "b/x", "c d+e", "ключ"]


def keyed_bucket(tag):
    name = bucket(tag)
    for key in KEYS:
        S3.put_object(Bucket=name, Key=key, Body=key.encode())
    return name


@check("ListObjectsV2: order, prefix, delimiter, start-after, paging", quick=True)
def _():
    name = keyed_bucket("l2")
    order = sorted(KEYS, key=lambda k: k.encode())
    listed = S3.list_objects_v2(Bucket=name)
    assert [o["Key"] for o in listed["Contents"]] == order, listed["Contents"]
    assert listed["KeyCount"] == len(KEYS) and not listed["IsTruncated"]
    assert listed["Contents"][0]["Size"] == 1 and listed["Contents"][0]["ETag"].startswith('"')
    folded = S3.list_objects_v2(Bucket=name, Delimiter="/")
    assert [o["Key"] for o in folded["Contents"]] == ["a", "a0", "b", "c d+e", "ключ"]
    assert [p["Prefix"] for p in folded["CommonPrefixes"]] == ["a/", "b/"]
    under = S3.list_objects_v2(Bucket=name, Prefix="a/", Delimiter="/")
    assert [o["Key"] for o in under["Contents"]] == ["a/b"]
    assert [p["Prefix"] for p in under["CommonPrefixes"]] == ["a/c/"]
    after = S3.list_objects_v2(Bucket=name, StartAfter="a0")
    assert [o["Key"] for o in after["Contents"]] == order[order.index("a0") + 1:]
    seen, token = [], None
    while True:
        kwargs = {"ContinuationToken": token} if token else {}
        page = S3.list_objects_v2(Bucket=name, MaxKeys=3, **kwargs)
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == order, seen
    entries, token = [], None
    while True:
        kwargs = {"ContinuationToken": token} if token else {}
        page = S3.list_objects_v2(Bucket=name, MaxKeys=1, Delimiter="/", **kwargs)
        entries += [o["Key"] for o in page.get("Contents", [])]
        entries += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert entries == ["a", "a/", "a0", "b", "b/", "c d+e", "ключ"], entries
    assert S3.list_objects_v2(Bucket=name, MaxKeys=0)["KeyCount"] == 0
    empty_and_delete(name)


@check("ListObjects V1: marker, NextMarker with a delimiter; paginator")
def _():
    name = keyed_bucket("l1")
    order = sorted(KEYS, key=lambda k: k.encode())
    page = S3.list_objects(Bucket=name, MaxKeys=2)
    assert [o["Key"] for o in page["Contents"]] == order[:2] and page["IsTruncated"]
    rest = S3.list_objects(Bucket=name, Marker=order[1])
    assert [o["Key"] for o in rest["Contents"]] == order[2:]
    folded = S3.list_objects(Bucket=name, Delimiter="/", MaxKeys=2)
    assert folded["IsTruncated"] and folded["NextMarker"] == "a/", folded
    for n in range(25):
        S3.put_object(Bucket=name, Key=f"p/{n:03}", Body=b"x")
    pages = S3.get_paginator("list_objects_v2").paginate(
        Bucket=name, Prefix="p/", PaginationConfig={"PageSize": 7})
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert keys == [f"p/{n:03}" for n in range(25)], keys
    empty_and_delete(name)


# ---- multipart ----------------------------------------------------------------------


def md5s_etag(parts):
    return '"' + hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + \
        f'-{len(parts)}"'


@check("multipart: 5 MiB parts and a 1-byte last, ETag, list parts and uploads", quick=True)
def _():
    name = bucket("mp")
    parts = [data(5 * MIB, 1), data(5 * MIB, 2), b"z"]
    upload = S3.create_multipart_upload(Bucket=name, Key="obj", ContentType="app/x",
                                        Metadata={"m": "1"})["UploadId"]
    listed = S3.list_multipart_uploads(Bucket=name)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in listed] == [("obj", upload)], listed
    etags = []
    for number, part in enumerate(parts, 1):
        answer = S3.upload_part(Bucket=name, Key="obj", UploadId=upload, PartNumber=number,
                                Body=part)
        assert answer["ETag"] == f'"{md5_hex(part)}"'
        etags.append(answer["ETag"])
    listed = S3.list_parts(Bucket=name, Key="obj", UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, 5 * MIB), (2, 5 * MIB), (3, 1)]
    done = S3.complete_multipart_upload(
        Bucket=name, Key="obj", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in
                                   enumerate(etags, 1)]})
    assert done["ETag"] == md5s_etag(parts), (done["ETag"], md5s_etag(parts))
    whole = b"".join(parts)
    got = S3.get_object(Bucket=name, Key="obj")
    assert got["Body"].read() == whole and got["ContentType"] == "app/x"
    assert got["Metadata"] == {"m": "1"} and got["ETag"] == done["ETag"]
    # A range across the parts' boundary.
    at = 5 * MIB - 10
    got = S3.get_object(Bucket=name, Key="obj", Range=f"bytes={at}-{at + 19}")
    assert got["Body"].read() == whole[at:at + 20]
    assert not S3.list_multipart_uploads(Bucket=name).get("Uploads")
    empty_and_delete(name)


@check("multipart errors: too small, wrong ETag, order, aborted upload")
def _():
    name = bucket("mpe")
    upload = S3.create_multipart_upload(Bucket=name, Key="o")["UploadId"]
    small = S3.upload_part(Bucket=name, Key="o", UploadId=upload, PartNumber=1,
                           Body=b"a" * (5 * MIB - 1))["ETag"]
    last = S3.upload_part(Bucket=name, Key="o", UploadId=upload, PartNumber=2, Body=b"b")["ETag"]
    complete = S3.complete_multipart_upload
    expect_error("EntityTooSmall", 400, complete, Bucket=name, Key="o", UploadId=upload,
                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": small},
                                            {"PartNumber": 2, "ETag": last}]})
    expect_error("InvalidPart", 400, complete, Bucket=name, Key="o", UploadId=upload,
                 MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": '"00"'}]})
    expect_error("InvalidPartOrder", 400, complete, Bucket=name, Key="o", UploadId=upload,
                 MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last},
                                            {"PartNumber": 1, "ETag": small}]})
    S3.abort_multipart_upload(Bucket=name, Key="o", UploadId=upload)
    expect_error("NoSuchUpload", 404, S3.upload_part, Bucket=name, Key="o", UploadId=upload,
                 PartNumber=3, Body=b"c")
    expect_error("NoSuchUpload", 404, S3.list_parts, Bucket=name, Key="o", UploadId=upload)
    empty_and_delete(name)


@check("upload part copy with a source range")
def _():
    name = bucket("upc")
    source = data(6 * MIB, 3)
    S3.put_object(Bucket=name, Key="src", Body=source)
    upload = S3.create_multipart_upload(Bucket=name, Key="o")["UploadId"]
    first = S3.upload_part_copy(Bucket=name, Key="o", UploadId=upload, PartNumber=1,
                                CopySource={"Bucket": name, "Key": "src"},
                                CopySourceRange=f"bytes=0-{5 * MIB - 1}")
    second = S3.upload_part_copy(Bucket=name, Key="o", UploadId=upload, PartNumber=2,
                                 CopySource={"Bucket": name, "Key": "src"},
                                 CopySourceRange=f"bytes={5 * MIB}-{6 * MIB - 1}")
    S3.complete_multipart_upload(
        Bucket=name, Key="o", UploadId=upload,
        MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": first["CopyPartResult"]["ETag"]},
            {"PartNumber": 2, "ETag": second["CopyPartResult"]["ETag"]}]})
    assert S3.get_object(Bucket=name, Key="o")["Body"].read() == source
    empty_and_delete(name)


# ---- authentication -----------------------------------------------------------------


@check("wrong secret, unknown key and anonymous requests refused", quick=True)
def _():
    name = bucket("auth")
    S3.put_object(Bucket=name, Key="k", Body=b"secret data")
    expect_error("SignatureDoesNotMatch", 403, client(secret="wrong").get_object,
                 Bucket=name, Key="k")
    expect_error("InvalidAccessKeyId", 403, client(access="nobody").get_object,
                 Bucket=name, Key="k")
    anonymous = client(signature=UNSIGNED)
    expect_error("AccessDenied", 403, anonymous.get_object, Bucket=name, Key="k")
    expect_error("AccessDenied", 403, anonymous.list_buckets)
    empty_and_delete(name)


def http(method, url, body=None):
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@check("presigned GET and PUT work; an expired presign is refused", quick=True)
def _():
    name = bucket("pre")
    S3.put_object(Bucket=name, Key="k", Body=b"shared")
    url = S3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "k"},
                                    ExpiresIn=300)
    assert http("GET", url) == (200, b"shared")
    put_url = S3.generate_presigned_url("put_object", Params={"Bucket": name, "Key": "up"},
                                        ExpiresIn=300)
    status, _ = http("PUT", put_url, b"uploaded")
    assert status == 200, status
    assert S3.get_object(Bucket=name, Key="up")["Body"].read() == b"uploaded"
    expired = S3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "k"},
                                        ExpiresIn=1)
    time.sleep(2.5)
    status, body = http("GET", expired)
    assert status == 403 and b"AccessDenied" in body, (status, body[:200])
    empty_and_delete(name)


def sign(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def chunked_put(bucket_name, key, body, chunk=64 * 1024, tamper=False):
    """A PUT with an `aws-chunked` body signed chunk by chunk
    (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), as SDKs send large uploads."""
    url = urllib.parse.urlsplit(ENDPOINT)
    now = datetime.now(timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/us-east-1/s3/aws4_request"
    pieces = [body[i:i + chunk] for i in range(0, len(body), chunk)] + [b""]
    lengths = sum(len(f"{len(p):x};chunk-signature={'0' * 64}\r\n") + len(p) + 2 for p in pieces)
    path = "/" + urllib.parse.quote(f"{bucket_name}/{key}", safe="/~")
    headers = {
        "host": url.netloc,
        "content-encoding": "aws-chunked",
        "content-length": str(lengths),
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(body)),
    }
    names = sorted(headers)
    canonical = "\n".join(["PUT", path, ""] + [f"{n}:{headers[n]}" for n in names] +
                          ["", ";".join(names), headers["x-amz-content-sha256"]])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    signing = f"AWS4{SECRET}".encode()
    for part in [day, "us-east-1", "s3", "aws4_request"]:
        signing = sign(signing, part)
    previous = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={';'.join(names)}, "
        f"Signature={previous}")
    encoded = b""
    empty = hashlib.sha256(b"").hexdigest()
    for piece in pieces:
        text = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous, empty,
                          hashlib.sha256(piece).hexdigest()])
        previous = hmac.new(signing, text.encode(), hashlib.sha256).hexdigest()
        if tamper and piece:
            piece, tamper = bytes([piece[0] ^ 1]) + piece[1:], False  # after signing
        encoded += f"{len(piece):x};chunk-signature={previous}\r\n".encode() + piece + b"\r\n"
    connection = HTTPConnection(url.hostname, url.port, timeout=60)
    connection.request("PUT", path, body=encoded, headers=headers)
    answer = connection.getresponse()
    return answer.status, answer.read()


@check("aws-chunked streaming upload, signed chunk by chunk", quick=True)
def _():
    name = bucket("chunk")
    body = data(300_000, 5)
    status, answer = chunked_put(name, "streamed", body)
    assert status == 200, (status, answer[:300])
    got = S3.get_object(Bucket=name, Key="streamed")
    assert got["Body"].read() == body and got["ETag"] == f'"{md5_hex(body)}"'
    status, answer = chunked_put(name, "tampered", body, tamper=True)
    assert status == 403 and b"SignatureDoesNotMatch" in answer, (status, answer[:300])
    expect_error(None, 404, S3.head_object, Bucket=name, Key="tampered")
    empty_and_delete(name)


# ---- the AWS CLI --------------------------------------------------------------------


def aws(*args):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    result = subprocess.run(["aws", "--endpoint-url", ENDPOINT, *args], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"aws {' '.join(args)}: {result.stderr.strip()}"
    return result.stdout


@check("AWS CLI: mb, cp of 20 MB (multipart) and back, ls, head-object, rm, rb", quick=True)
def _():
    name = f"t-{RUN}-cli"
    with tempfile.TemporaryDirectory() as dir:
        source, back = os.path.join(dir, "f"), os.path.join(dir, "b")
        body = data(20_000_000, 9)
        with open(source, "wb") as f:
            f.write(body)
        aws("s3", "mb", f"s3://{name}")
        aws("s3", "cp", "--only-show-errors", source, f"s3://{name}/d/f")
        assert "d/f" in aws("s3", "ls", "--recursive", f"s3://{name}/")
        head = aws("s3api", "head-object", "--bucket", name, "--key", "d/f")
        assert '"ContentLength": 20000000' in head and '-3\\""' in head, head
        aws("s3", "cp", "--only-show-errors", f"s3://{name}/d/f", back)
        with open(back, "rb") as f:
            assert f.read() == body
        aws("s3", "rm", "--recursive", f"s3://{name}/")
        aws("s3", "rb", f"s3://{name}")


def main():
    for name, quick, fn in checks:
        if SUITE == "quick" and not quick:
            continue
        start = time.monotonic()
        try:
            fn()
            print(f"ok    {name} ({time.monotonic() - start:.1f} s)", flush=True)
        except Exception as error:  # one check's failure never stops the others
            failures.append(name)
            detail = "".join(traceback.format_exception_only(type(error), error)).strip()
            print(f"FAIL  {name}: {detail}", flush=True)
    ran = sum(1 for _, quick, _ in checks if SUITE != "quick" or quick)
    print(f"{ran} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
