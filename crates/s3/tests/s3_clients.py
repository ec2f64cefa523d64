#!/usr/bin/env python3
"""somnus's S3 gateway driven by real S3 clients: boto3 and the AWS CLI.

Run by crates/cli/tests/s3_gateway.rs against a gateway in front of a real cluster, or by
hand against any running gateway:

    S3_ENDPOINT=http://127.0.0.1:9000 S3_ACCESS_KEY=... S3_SECRET_KEY=... \
        python3 crates/s3/tests/s3_clients.py

S3_ONLY = a part of the names of the checks to run (default: all of the suite).
S3_SUITE = full (default) or quick (put/get/head/list/range/multipart/delete, signatures,
presigns, unknown keys and aws-chunked, for a re-run while part of the cluster sleeps;
small enough that the test cluster's 64 MiB loggers hold what it writes, so no sleeper
has to be woken for room). Every check asserts what Amazon S3 answers
(error Code and HTTP status included). Each check runs on its own: a failure is
printed and the next check runs. One line per check, then `N checks, M failed`; the exit
status is 0 only if every check passed. Every bucket made by a run is named
`s3c-<random hex>-...` and deleted at the end.

Only the standard library, boto3/botocore and the `aws` command are used.
"""

import base64
import hashlib
import hmac
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
import ssl
from http.client import HTTPConnection, HTTPSConnection

import boto3
import botocore.handlers
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"].rstrip("/")
ACCESS = os.environ["S3_ACCESS_KEY"]
SECRET = os.environ["S3_SECRET_KEY"]
SUITE = os.environ.get("S3_SUITE", "full")
BUDGET_S = 900  # checks not started by then are reported failed, not run
REGION = "us-east-1"
# An https:// endpoint is checked against AWS_CA_BUNDLE, as boto3 and the AWS CLI do.
TLS = (ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE"))
       if ENDPOINT.startswith("https://") else None)
MIB = 1 << 20
RUN = f"s3c-{secrets.token_hex(4)}"  # every bucket of this run starts with it


def client(access=ACCESS, secret=SECRET, signature="s3v4"):
    config = Config(
        s3={"addressing_style": "path"},
        signature_version=signature,
        connect_timeout=30,
        read_timeout=30,
        # One attempt, no retry, so that a failure shows as it is (botocore's
        # `max_attempts` counts the retries after the first attempt,
        # `total_max_attempts` every attempt).
        retries={"total_max_attempts": 1},
    )
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name=REGION,
        config=config,
    )


S3 = client()

# ---- the harness ----------------------------------------------------------------------

CHECKS = []  # (name, quick, function), run in this order


def check(name, quick=False):
    def register(fn):
        CHECKS.append((name, quick, fn))
        return fn

    return register


def fixture(fn):
    """A lazily built value shared by several checks; built once, its failure remembered
    (the checks that need it fail with the same reason, the others run as usual)."""
    state = {}

    def get():
        if "value" not in state and "error" not in state:
            try:
                state["value"] = fn()
            except Exception as error:  # noqa: BLE001 (reported by every user)
                state["error"] = error
        if "error" in state:
            error = state["error"]
            raise AssertionError(f"fixture {fn.__name__} failed: {describe(error)}")
        return state["value"]

    return get


def describe(error):
    if isinstance(error, ClientError):
        e, meta = error.response.get("Error", {}), error.response.get("ResponseMetadata", {})
        return (f"{error.operation_name}: {e.get('Code')} {meta.get('HTTPStatusCode')} "
                f"{e.get('Message', '')}".strip())
    return "".join(traceback.format_exception_only(type(error), error)).strip()


def status_of(answer):
    return answer["ResponseMetadata"]["HTTPStatusCode"]


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def expect_eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}")


def expect_error(code, status, fn, **kwargs):
    """Calls `fn(**kwargs)`, which must fail with S3 error `code` (None: any code, as for
    HEAD, whose answer has no body) and HTTP `status`."""
    what = f"{fn.__name__}"
    try:
        answer = fn(**kwargs)
    except ClientError as error:
        got_code = error.response.get("Error", {}).get("Code")
        got_status = error.response["ResponseMetadata"]["HTTPStatusCode"]
        if got_status != status or (code is not None and got_code != code):
            raise AssertionError(f"{what}: expected {code or ''} {status}, got {got_code} "
                                 f"{got_status} ({error.response['Error'].get('Message', '')})")
        return error
    raise AssertionError(f"{what}: expected {code or ''} {status}, got {status_of(answer)}")


def soft(failures, fn, *args, **kwargs):
    """Runs one sub-case of a check, keeping its failure in `failures`, so a check
    reports every sub-case that is wrong and not only the first."""
    try:
        fn(*args, **kwargs)
    except (AssertionError, ClientError) as error:
        failures.append(describe(error) if isinstance(error, ClientError) else str(error))


def all_passed(failures):
    expect(not failures, "; ".join(failures))


# ---- buckets made by the run, and their removal ---------------------------------------

CREATED = []


def new_bucket(tag):
    name = f"{RUN}-{tag}"
    S3.create_bucket(Bucket=name)
    CREATED.append(name)
    return name


def raw_lister():
    """A client whose listings ask for no `encoding-type` and decode nothing, so it sees
    keys exactly as stored even if the gateway's URL encoding of names is wrong."""
    raw = client()
    events = raw.meta.events
    events.unregister("before-parameter-build.s3.ListObjectsV2",
                      botocore.handlers.set_list_objects_encoding_type_url)
    events.unregister("after-call.s3.ListObjectsV2", botocore.handlers.decode_list_object_v2)
    return raw


def remove_bucket(name):
    raw = raw_lister()
    for page in raw.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        for key in keys:
            raw.delete_object(Bucket=name, Key=key["Key"])
    for upload in S3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        S3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    S3.delete_bucket(Bucket=name)


def cleanup():
    """Deletes every bucket the run made; the names it could not delete."""
    left = []
    existing = {b["Name"] for b in S3.list_buckets().get("Buckets", [])}
    for name in sorted(existing):
        if name.startswith(RUN + "-") or name in CREATED:
            try:
                remove_bucket(name)
            except Exception as error:  # noqa: BLE001
                left.append(f"{name} ({describe(error)})")
    return left


# ---- data -----------------------------------------------------------------------------


def data(n, seed=1):
    """`n` deterministic pseudo-random bytes: no period, so a read at a wrong offset shows."""
    return random.Random(seed).randbytes(n)


def md5_hex(body):
    return hashlib.md5(body).hexdigest()


def quoted_md5(body):
    return f'"{md5_hex(body)}"'


def md5_b64(body):
    return base64.b64encode(hashlib.md5(body).digest()).decode()


def multipart_etag(parts):
    """S3's ETag of a multipart object: the MD5 of the parts' binary MD5s, then -N."""
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def read(bucket, key, **kwargs):
    return S3.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()


def http(method, url, body=None, headers=None):
    """A plain HTTP request (urllib); (status, headers, body) even for an error status."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=TLS) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def error_code(xml_body):
    try:
        return ET.fromstring(xml_body).findtext("Code")
    except ET.ParseError:
        return None


# ---- buckets --------------------------------------------------------------------------


@fixture
def plain_bucket():
    """A bucket for checks that do not list it."""
    return new_bucket("plain")


@check("bucket: create, then head answers 200", quick=True)
def _():
    name = new_bucket("create")
    expect_eq(status_of(S3.head_bucket(Bucket=name)), 200, "HeadBucket status")


@check("bucket: its owner creating it again -> 200 (us-east-1), its objects kept; "
       "a LocationConstraint -> InvalidLocationConstraint")
def _():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="kept", Body=b"k")
    expect_eq(status_of(S3.create_bucket(Bucket=name)), 200, "CreateBucket again")
    expect_eq(read(name, "kept"), b"k", "the object after")
    expect_error("InvalidLocationConstraint", 400, S3.create_bucket, Bucket=f"{RUN}-eu",
                 CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})


@check("bucket: list buckets by pages of one (MaxBuckets, ContinuationToken, Prefix)")
def _():
    first, second = new_bucket("page-a"), new_bucket("page-b")
    seen, token = [], None
    for _ in range(10):
        page = S3.list_buckets(MaxBuckets=1, Prefix=f"{RUN}-page-",
                               **({"ContinuationToken": token} if token else {}))
        expect(len(page["Buckets"]) <= 1, "more than MaxBuckets")
        seen += [b["Name"] for b in page["Buckets"]]
        token = page.get("ContinuationToken")
        if not token:
            break
    expect_eq(seen, [first, second], "buckets over pages")


@check("bucket: head a missing bucket -> 404")
def _():
    expect_error(None, 404, S3.head_bucket, Bucket=f"{RUN}-missing")


@check("bucket: list buckets shows it with a CreationDate", quick=True)
def _():
    name = plain_bucket()
    listed = [b for b in S3.list_buckets()["Buckets"] if b["Name"] == name]
    expect_eq(len(listed), 1, f"buckets named {name} in ListBuckets")
    created = listed[0].get("CreationDate")
    expect(isinstance(created, datetime), f"CreationDate: {created!r}")
    age = abs((datetime.now(timezone.utc) - created).total_seconds())
    expect(age < 3600, f"CreationDate {created} is {age:.0f} s from now")


@check("bucket: get_bucket_location is us-east-1 (empty LocationConstraint)")
def _():
    location = S3.get_bucket_location(Bucket=plain_bucket()).get("LocationConstraint")
    expect(location in (None, ""), f"LocationConstraint {location!r}")


@check("bucket: delete a non-empty bucket -> BucketNotEmpty 409")
def _():
    name = new_bucket("nonempty")
    S3.put_object(Bucket=name, Key="k", Body=b"x")
    expect_error("BucketNotEmpty", 409, S3.delete_bucket, Bucket=name)
    S3.head_bucket(Bucket=name)
    expect_eq(read(name, "k"), b"x", "the object in the bucket not deleted")


@check("bucket: delete an empty bucket -> 204, then it is gone", quick=True)
def _():
    name = new_bucket("delete")
    expect_eq(status_of(S3.delete_bucket(Bucket=name)), 204, "DeleteBucket status")
    expect_error(None, 404, S3.head_bucket, Bucket=name)


@check("bucket: delete a missing bucket -> NoSuchBucket 404")
def _():
    expect_error("NoSuchBucket", 404, S3.delete_bucket, Bucket=f"{RUN}-missing")


@check("bucket: invalid names (Bad_Name, too short, IP form, a dash by a dot) -> "
       "InvalidBucketName 400")
def _():
    failures = []
    for name in ["Bad_Name", "ab", "192.168.5.4", "-leading-dash", f"{RUN}-.x", f"{RUN}.-x"]:
        soft(failures, expect_error, "InvalidBucketName", 400, S3.create_bucket, Bucket=name)
    all_passed(failures)


# ---- objects --------------------------------------------------------------------------


@check("object: put then get returns the same bytes", quick=True)
def _():
    name, body = plain_bucket(), data(100_000, 2)
    S3.put_object(Bucket=name, Key="round/trip", Body=body)
    expect(read(name, "round/trip") == body, "GET returned other bytes")


@check("object: ETag is the quoted MD5 hex on PUT, GET and HEAD", quick=True)
def _():
    name, body = plain_bucket(), data(54_321, 3)
    want = quoted_md5(body)
    expect_eq(S3.put_object(Bucket=name, Key="etag", Body=body)["ETag"], want, "PUT ETag")
    expect_eq(S3.get_object(Bucket=name, Key="etag")["ETag"], want, "GET ETag")
    expect_eq(S3.head_object(Bucket=name, Key="etag")["ETag"], want, "HEAD ETag")


@check("object: head gives size, Last-Modified, ETag", quick=True)
def _():
    name, body = plain_bucket(), data(777, 4)
    S3.put_object(Bucket=name, Key="head", Body=body)
    head = S3.head_object(Bucket=name, Key="head")
    expect_eq(head["ContentLength"], len(body), "ContentLength")
    modified = head.get("LastModified")
    expect(isinstance(modified, datetime), f"LastModified {modified!r}")
    expect_eq(head["ETag"], quoted_md5(body), "ETag")


@check("object: Content-Type and x-amz-meta-* round-trip on GET and HEAD")
def _():
    name = plain_bucket()
    meta = {"colour": "blue", "n": "7", "with-dash": "a value with spaces"}
    S3.put_object(Bucket=name, Key="meta", Body=b"m", ContentType="text/plain; charset=utf-8",
                  Metadata=meta)
    for op in (S3.get_object, S3.head_object):
        answer = op(Bucket=name, Key="meta")
        expect_eq(answer["ContentType"], "text/plain; charset=utf-8", f"{op.__name__} ContentType")
        expect_eq(answer["Metadata"], meta, f"{op.__name__} Metadata")


@check("object: Cache-Control, Content-Disposition, -Language and Expires round-trip; "
       "response-* parameters override them on GET and HEAD")
def _():
    name = plain_bucket()
    expires = datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    S3.put_object(Bucket=name, Key="headers", Body=b"h", CacheControl="max-age=60",
                  ContentDisposition="attachment", ContentLanguage="cy", Expires=expires)
    for op in (S3.get_object, S3.head_object):
        answer = op(Bucket=name, Key="headers")
        for field, want in [("CacheControl", "max-age=60"), ("ContentDisposition", "attachment"),
                            ("ContentLanguage", "cy"), ("Expires", expires)]:
            expect_eq(answer.get(field), want, f"{op.__name__} {field}")
        answer = op(Bucket=name, Key="headers", ResponseContentType="text/x-named",
                    ResponseCacheControl="no-cache", ResponseContentDisposition="inline",
                    ResponseContentLanguage="en", ResponseContentEncoding="identity",
                    ResponseExpires=datetime(2032, 1, 1, tzinfo=timezone.utc))
        for field, want in [("ContentType", "text/x-named"), ("CacheControl", "no-cache"),
                            ("ContentDisposition", "inline"), ("ContentLanguage", "en"),
                            ("ContentEncoding", "identity"),
                            ("Expires", datetime(2032, 1, 1, tzinfo=timezone.utc))]:
            expect_eq(answer.get(field), want, f"{op.__name__} with response-* {field}")


@check("object: a correct Content-MD5 is accepted")
def _():
    name, body = plain_bucket(), b"payload with a digest"
    S3.put_object(Bucket=name, Key="md5-good", Body=body, ContentMD5=md5_b64(body))
    expect_eq(read(name, "md5-good"), body, "stored bytes")


@check("object: a wrong Content-MD5 -> BadDigest 400, the old object stays")
def _():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="md5-bad", Body=b"the old object")
    expect_error("BadDigest", 400, S3.put_object, Bucket=name, Key="md5-bad",
                 Body=b"a new object", ContentMD5=md5_b64(b"something else"))
    expect_eq(read(name, "md5-bad"), b"the old object", "object after the refused PUT")
    expect_error("BadDigest", 400, S3.put_object, Bucket=name, Key="md5-bad-new",
                 Body=b"never stored", ContentMD5=md5_b64(b"something else"))
    expect_error("NoSuchKey", 404, S3.get_object, Bucket=name, Key="md5-bad-new")


@check("object: an empty object", quick=True)
def _():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="empty", Body=b"")
    got = S3.get_object(Bucket=name, Key="empty")
    expect_eq(got["Body"].read(), b"", "body")
    expect_eq(got["ContentLength"], 0, "ContentLength")
    expect_eq(got["ETag"], quoted_md5(b""), "ETag")


@check("object: an overwrite replaces bytes, ETag and metadata", quick=True)
def _():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="over", Body=b"first, the longer one", Metadata={"v": "1"})
    S3.put_object(Bucket=name, Key="over", Body=b"second", Metadata={"w": "2"})
    got = S3.get_object(Bucket=name, Key="over")
    expect_eq(got["Body"].read(), b"second", "body")
    expect_eq(got["ETag"], quoted_md5(b"second"), "ETag")
    expect_eq(got["Metadata"], {"w": "2"}, "Metadata")


@check("object: get a missing key -> NoSuchKey 404", quick=True)
def _():
    expect_error("NoSuchKey", 404, S3.get_object, Bucket=plain_bucket(), Key="missing")


@check("object: head a missing key -> 404", quick=True)
def _():
    expect_error(None, 404, S3.head_object, Bucket=plain_bucket(), Key="missing")


@check("object: get or put in a missing bucket -> NoSuchBucket 404")
def _():
    missing = f"{RUN}-missing"
    failures = []
    soft(failures, expect_error, "NoSuchBucket", 404, S3.get_object, Bucket=missing, Key="k")
    soft(failures, expect_error, "NoSuchBucket", 404, S3.put_object, Bucket=missing, Key="k",
         Body=b"x")
    all_passed(failures)


@check("object: delete answers 204, again on the missing key too", quick=True)
def _():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="del", Body=b"x")
    expect_eq(status_of(S3.delete_object(Bucket=name, Key="del")), 204, "first DELETE")
    expect_error("NoSuchKey", 404, S3.get_object, Bucket=name, Key="del")
    expect_eq(status_of(S3.delete_object(Bucket=name, Key="del")), 204, "second DELETE")
    expect_eq(status_of(S3.delete_object(Bucket=name, Key="never-was")), 204, "DELETE never-was")


@check("object: delete_objects deletes, a missing key is reported deleted", quick=True)
def _():
    name = new_bucket("multidel")
    for key in ["a", "b", "c"]:
        S3.put_object(Bucket=name, Key=key, Body=key.encode())
    answer = S3.delete_objects(
        Bucket=name, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}, {"Key": "zz-missing"}]})
    expect_eq(sorted(d["Key"] for d in answer.get("Deleted", [])), ["a", "b", "zz-missing"],
              "Deleted")
    expect_eq(answer.get("Errors", []), [], "Errors")
    left = [o["Key"] for o in S3.list_objects_v2(Bucket=name).get("Contents", [])]
    expect_eq(left, ["c"], "keys left")


@check("object: delete_objects in quiet mode answers no Deleted entries")
def _():
    name = new_bucket("quietdel")
    for key in ["a", "b"]:
        S3.put_object(Bucket=name, Key=key, Body=b"x")
    answer = S3.delete_objects(
        Bucket=name, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}], "Quiet": True})
    expect_eq(answer.get("Deleted", []), [], "Deleted")
    expect_eq(answer.get("Errors", []), [], "Errors")
    expect_eq(S3.list_objects_v2(Bucket=name)["KeyCount"], 0, "KeyCount after")


@check("object: keys with unicode, spaces, '+', '%', '?', '#', '..' round-trip")
def _():
    name, failures = plain_bucket(), []
    for key in ["ключ/файл", "with space+plus", "per%25cent%2F", "q?x=1&y=2#frag",
                "../../etc/passwd", "tab\there", "emoji-\U0001f600"]:
        def one(key=key):
            S3.put_object(Bucket=name, Key=key, Body=key.encode())
            expect_eq(read(name, key), key.encode(), f"GET {key!r}")
            expect_eq(S3.head_object(Bucket=name, Key=key)["ContentLength"], len(key.encode()),
                      f"HEAD {key!r} length")
        soft(failures, one)
    all_passed(failures)


# ---- keys: length ---------------------------------------------------------------------


@check("key: a key of 1024 bytes works (put, get, head, list)")
def _():
    name = new_bucket("longkey")
    key = "k" * 1000 + "ü" * 12  # 1000 + 24 = 1024 bytes of UTF-8
    expect_eq(len(key.encode()), 1024, "key length")
    S3.put_object(Bucket=name, Key=key, Body=b"long")
    expect_eq(read(name, key), b"long", "GET")
    S3.head_object(Bucket=name, Key=key)
    listed = [o["Key"] for o in S3.list_objects_v2(Bucket=name).get("Contents", [])]
    expect_eq(listed, [key], "listed keys")


@check("key: a key of 1025 bytes -> KeyTooLongError 400")
def _():
    name = plain_bucket()
    expect_error("KeyTooLongError", 400, S3.put_object, Bucket=name, Key="k" * 1025, Body=b"x")


# ---- range reads ----------------------------------------------------------------------

RANGE_SIZE = 3 * MIB + 123


@fixture
def range_object():
    name, body = plain_bucket(), data(RANGE_SIZE, 5)
    S3.put_object(Bucket=name, Key="ranged", Body=body)
    return name, "ranged", body


def expect_range(spec, first, last):
    name, key, body = range_object()
    got = S3.get_object(Bucket=name, Key=key, Range=spec)
    expect_eq(status_of(got), 206, f"{spec} status")
    expect(got["Body"].read() == body[first:last + 1], f"{spec}: other bytes than {first}-{last}")
    expect_eq(got["ContentLength"], last - first + 1, f"{spec} ContentLength")
    expect_eq(got.get("ContentRange"), f"bytes {first}-{last}/{len(body)}", f"{spec} ContentRange")


@check("range: bytes=0-0 is the first byte", quick=True)
def _():
    expect_range("bytes=0-0", 0, 0)


@check("range: bytes=1048570-1048590 across the 1 MiB boundary", quick=True)
def _():
    expect_range("bytes=1048570-1048590", 1048570, 1048590)


@check("range: bytes=1048000-3145000 across two 1 MiB boundaries", quick=True)
def _():
    expect_range("bytes=1048000-3145000", 1048000, 3145000)


@check("range: suffix bytes=-10 is the last ten bytes", quick=True)
def _():
    expect_range("bytes=-10", RANGE_SIZE - 10, RANGE_SIZE - 1)


@check("range: open bytes=N- runs to the end", quick=True)
def _():
    expect_range(f"bytes={RANGE_SIZE - 1000}-", RANGE_SIZE - 1000, RANGE_SIZE - 1)


@check("range: an end past the object's end is cut to its last byte", quick=True)
def _():
    expect_range(f"bytes={RANGE_SIZE - 5}-{RANGE_SIZE + 1000}", RANGE_SIZE - 5, RANGE_SIZE - 1)


@check("range: a start past the end -> InvalidRange 416", quick=True)
def _():
    name, key, _ = range_object()
    expect_error("InvalidRange", 416, S3.get_object, Bucket=name, Key=key,
                 Range=f"bytes={RANGE_SIZE + 10}-")
    expect_error("InvalidRange", 416, S3.get_object, Bucket=name, Key=key,
                 Range=f"bytes={RANGE_SIZE}-{RANGE_SIZE + 5}")


@check("range: HEAD with a range gives 206, its ContentLength and ContentRange")
def _():
    name, key, _ = range_object()
    head = S3.head_object(Bucket=name, Key=key, Range="bytes=10-19")
    expect_eq(status_of(head), 206, "status")
    expect_eq(head["ContentLength"], 10, "ContentLength")
    expect_eq(head.get("ContentRange"), f"bytes 10-19/{RANGE_SIZE}", "ContentRange")


# ---- conditional GET and HEAD ---------------------------------------------------------


@fixture
def conditional_object():
    name = plain_bucket()
    etag = S3.put_object(Bucket=name, Key="cond", Body=b"conditional")["ETag"]
    return name, "cond", etag


NOW = datetime.now(timezone.utc)
FUTURE, PAST = NOW + timedelta(days=1), NOW - timedelta(days=1)
OTHER_ETAG = '"0123456789abcdef0123456789abcdef"'


def conditional(ops, expected, **conditions):
    """Runs GET and/or HEAD with `conditions`; `expected` is 200 or the error status."""
    name, key, etag = conditional_object()
    conditions = {k: (etag if v == "ETAG" else v) for k, v in conditions.items()}
    failures = []
    for op in ops:
        if expected == 200:
            soft(failures, lambda op=op: expect_eq(
                status_of(op(Bucket=name, Key=key, **conditions)), 200, op.__name__))
        else:
            # GET's 412 has an XML body with its Code; HEAD's answers and 304 have none.
            code = "PreconditionFailed" if expected == 412 and op is S3.get_object else None
            soft(failures, expect_error, code, expected, op, Bucket=name, Key=key, **conditions)
    all_passed(failures)


@check("conditional: If-Match with the ETag -> 200 (GET, HEAD)")
def _():
    conditional([S3.get_object, S3.head_object], 200, IfMatch="ETAG")


@check("conditional: If-Match with another ETag -> PreconditionFailed 412 (GET, HEAD)")
def _():
    conditional([S3.get_object, S3.head_object], 412, IfMatch=OTHER_ETAG)


@check("conditional: If-None-Match with the ETag -> 304 (GET, HEAD)")
def _():
    conditional([S3.get_object, S3.head_object], 304, IfNoneMatch="ETAG")


@check("conditional: If-None-Match with another ETag -> 200")
def _():
    conditional([S3.get_object, S3.head_object], 200, IfNoneMatch=OTHER_ETAG)


@check("conditional: a 304 carries the ETag and Last-Modified; PUT If-Match on no "
       "object -> NoSuchKey 404")
def _():
    name = plain_bucket()
    etag = S3.put_object(Bucket=name, Key="c304", Body=b"x")["ETag"]
    status, headers, _ = http("GET", S3.generate_presigned_url(
        "get_object", Params={"Bucket": name, "Key": "c304"}), headers={"If-None-Match": etag})
    expect_eq((status, headers.get("ETag")), (304, etag), "304 and its ETag")
    expect(headers.get("Last-Modified", "").endswith("GMT"), "Last-Modified on the 304")
    expect_error("NoSuchKey", 404, S3.put_object, Bucket=name, Key="none", Body=b"x",
                 IfMatch=etag)


@check("conditional: CompleteMultipartUpload with If-None-Match and If-Match")
def _():
    name = plain_bucket()

    def upload(**conditions):
        upload = S3.create_multipart_upload(Bucket=name, Key="cmp")["UploadId"]
        etag = S3.upload_part(Bucket=name, Key="cmp", UploadId=upload, PartNumber=1,
                              Body=b"p")["ETag"]
        return S3.complete_multipart_upload(
            Bucket=name, Key="cmp", UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}, **conditions)
    expect_error("NoSuchKey", 404, upload, IfMatch="*")
    etag = upload(IfNoneMatch="*")["ETag"]
    expect_error("PreconditionFailed", 412, upload, IfNoneMatch="*")
    expect_error("PreconditionFailed", 412, upload, IfMatch='"0123456789abcdef0123456789abcdef"')
    expect_eq(upload(IfMatch=etag)["ETag"], etag, "the ETag of the same part again")
    expect_eq(read(name, "cmp"), b"p", "the object")


@check("object: stored without a Content-Type it is binary/octet-stream; an empty "
       "Delimiter is not echoed")
def _():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="untyped", Body=b"x")
    expect_eq(S3.head_object(Bucket=name, Key="untyped")["ContentType"],
              "binary/octet-stream", "ContentType")
    expect("Delimiter" not in S3.list_objects_v2(Bucket=name, Delimiter=""),
           "an empty Delimiter echoed")


@check("conditional: If-Modified-Since in the future -> 304 (GET, HEAD)")
def _():
    conditional([S3.get_object, S3.head_object], 304, IfModifiedSince=FUTURE)


@check("conditional: If-Modified-Since in the past -> 200")
def _():
    conditional([S3.get_object, S3.head_object], 200, IfModifiedSince=PAST)


@check("conditional: If-Unmodified-Since in the past -> PreconditionFailed 412 (GET, HEAD)")
def _():
    conditional([S3.get_object, S3.head_object], 412, IfUnmodifiedSince=PAST)


@check("conditional: If-Unmodified-Since in the future -> 200")
def _():
    conditional([S3.get_object, S3.head_object], 200, IfUnmodifiedSince=FUTURE)


# ---- CopyObject -----------------------------------------------------------------------


@fixture
def copy_source():
    name, body = plain_bucket(), data(200_000, 6)
    put = S3.put_object(Bucket=name, Key="copy-src", Body=body, ContentType="text/x-source",
                        Metadata={"a": "1", "b": "two"})
    return name, "copy-src", body, put["ETag"]


@check("copy: the COPY directive keeps bytes, content type, metadata and ETag")
def _():
    name, key, body, etag = copy_source()
    copied = S3.copy_object(Bucket=name, Key="copy-dst", CopySource={"Bucket": name, "Key": key})
    expect_eq(copied["CopyObjectResult"]["ETag"], etag, "CopyObjectResult ETag")
    got = S3.get_object(Bucket=name, Key="copy-dst")
    expect(got["Body"].read() == body, "the copy's bytes differ")
    expect_eq(got["ETag"], etag, "the copy's ETag")
    expect_eq(got["ContentType"], "text/x-source", "ContentType")
    expect_eq(got["Metadata"], {"a": "1", "b": "two"}, "Metadata")


@check("copy: the REPLACE directive sets new content type and metadata")
def _():
    name, key, body, _ = copy_source()
    S3.copy_object(Bucket=name, Key="copy-rep", CopySource={"Bucket": name, "Key": key},
                   MetadataDirective="REPLACE", ContentType="text/y", Metadata={"c": "3"})
    head = S3.head_object(Bucket=name, Key="copy-rep")
    expect_eq(head["ContentType"], "text/y", "ContentType")
    expect_eq(head["Metadata"], {"c": "3"}, "Metadata")
    expect(read(name, "copy-rep") == body, "the copy's bytes differ")


@check("copy: from a missing key -> NoSuchKey 404")
def _():
    name = plain_bucket()
    expect_error("NoSuchKey", 404, S3.copy_object, Bucket=name, Key="copy-x",
                 CopySource={"Bucket": name, "Key": "missing"})


# ---- ListObjectsV2 --------------------------------------------------------------------

# S3 lists keys in the order of their UTF-8 bytes.
LIST_KEYS = ["a", "a/b", "a/c/d", "a0", "b", "b/x", "ключ"]
LIST_ORDER = sorted(LIST_KEYS, key=lambda k: k.encode())
# Names a listing must give back exactly (boto3 asks for encoding-type=url and decodes).
ODD_KEYS = ["a", "a/b", "a0", "b", "ключ", "key with spaces+plus", "q?x=1&y=2#f", "100%25"]


@fixture
def listed_bucket():
    name = new_bucket("list")
    for key in LIST_KEYS:
        S3.put_object(Bucket=name, Key=key, Body=key.encode())
    return name


def keys_of(page):
    return [o["Key"] for o in page.get("Contents", [])]


def prefixes_of(page):
    return [p["Prefix"] for p in page.get("CommonPrefixes", [])]


def walk_v2(name, **kwargs):
    """Every page of a ListObjectsV2 walk by ContinuationToken (at most 100 pages)."""
    pages, token = [], None
    for _ in range(100):
        page = S3.list_objects_v2(Bucket=name, **kwargs,
                                  **({"ContinuationToken": token} if token else {}))
        pages.append(page)
        if not page["IsTruncated"]:
            return pages
        token = page.get("NextContinuationToken")
        expect(token, f"page {len(pages)} IsTruncated without NextContinuationToken")
    raise AssertionError("more than 100 pages")


@check("list v2: every key once, in S3's byte order, with Size and ETag", quick=True)
def _():
    page = S3.list_objects_v2(Bucket=listed_bucket())
    expect_eq(keys_of(page), LIST_ORDER, "keys")
    expect_eq(page["IsTruncated"], False, "IsTruncated")
    expect_eq([(o["Size"], o["ETag"]) for o in page["Contents"]],
              [(len(k.encode()), quoted_md5(k.encode())) for k in LIST_ORDER], "Size and ETag")


@check("list v2 and v1: names come back exact (unicode, spaces, '+', '?', '%')")
def _():
    name = new_bucket("names")
    for key in ODD_KEYS:
        S3.put_object(Bucket=name, Key=key, Body=b"x")
    want = sorted(ODD_KEYS, key=lambda k: k.encode())
    failures = []
    soft(failures, lambda: expect_eq(keys_of(S3.list_objects_v2(Bucket=name)), want, "v2 keys"))
    soft(failures, lambda: expect_eq(keys_of(S3.list_objects(Bucket=name)), want, "v1 keys"))
    all_passed(failures)


@check("list v2: KeyCount counts keys and common prefixes", quick=True)
def _():
    name = listed_bucket()
    expect_eq(S3.list_objects_v2(Bucket=name)["KeyCount"], len(LIST_KEYS), "KeyCount")
    folded = S3.list_objects_v2(Bucket=name, Delimiter="/")
    expect_eq(folded["KeyCount"], len(keys_of(folded)) + len(prefixes_of(folded)),
              "KeyCount with a delimiter")
    expect_eq(S3.list_objects_v2(Bucket=name, MaxKeys=3)["KeyCount"], 3, "KeyCount MaxKeys=3")


@check("list v2: prefix", quick=True)
def _():
    name = listed_bucket()
    expect_eq(keys_of(S3.list_objects_v2(Bucket=name, Prefix="a/")), ["a/b", "a/c/d"], "Prefix a/")
    expect_eq(keys_of(S3.list_objects_v2(Bucket=name, Prefix="a")), ["a", "a/b", "a/c/d", "a0"],
              "Prefix a")
    expect_eq(keys_of(S3.list_objects_v2(Bucket=name, Prefix="клю")), ["ключ"], "Prefix клю")
    expect_eq(keys_of(S3.list_objects_v2(Bucket=name, Prefix="zzz")), [], "Prefix zzz")


@check("list v2: delimiter '/' folds CommonPrefixes", quick=True)
def _():
    name = listed_bucket()
    folded = S3.list_objects_v2(Bucket=name, Delimiter="/")
    expect_eq(keys_of(folded), [k for k in LIST_ORDER if "/" not in k], "keys")
    expect_eq(prefixes_of(folded), ["a/", "b/"], "CommonPrefixes")
    under = S3.list_objects_v2(Bucket=name, Prefix="a/", Delimiter="/")
    expect_eq((keys_of(under), prefixes_of(under)), (["a/b"], ["a/c/"]), "under a/")


@check("list v2 and v1: a key with U+10FFFF after a common prefix folds into it once")
def _():
    name = new_bucket("maxchar")
    for key in ["p/\U0010ffffa", "p/b", "q"]:
        S3.put_object(Bucket=name, Key=key, Body=b"x")
    failures = []
    whole = S3.list_objects_v2(Bucket=name, Delimiter="/")
    soft(failures, lambda: expect_eq((prefixes_of(whole), keys_of(whole)), (["p/"], ["q"]),
                                     "one page"))
    pages = walk_v2(name, Delimiter="/", MaxKeys=1)
    seen = [x for p in pages for x in prefixes_of(p) + keys_of(p)]
    soft(failures, lambda: expect_eq(seen, ["p/", "q"], "pages of one"))
    v1 = S3.list_objects(Bucket=name, Delimiter="/", MaxKeys=1)
    v1_next = S3.list_objects(Bucket=name, Delimiter="/", MaxKeys=1, Marker=v1["NextMarker"])
    soft(failures, lambda: expect_eq(prefixes_of(v1) + keys_of(v1_next), ["p/", "q"], "v1 pages"))
    all_passed(failures)


@check("multipart: list_multipart_uploads pages by key and id, folds by delimiter")
def _():
    name = new_bucket("uploads")
    for key in ["a", "a", "d/x", "e"]:
        S3.create_multipart_upload(Bucket=name, Key=key)
    seen, markers = [], {}
    for _ in range(10):
        page = S3.list_multipart_uploads(Bucket=name, MaxUploads=1, Delimiter="/", **markers)
        seen += [u["Key"] for u in page.get("Uploads", [])]
        seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        markers = {"KeyMarker": page["NextKeyMarker"]}
        if page.get("NextUploadIdMarker"):
            markers["UploadIdMarker"] = page["NextUploadIdMarker"]
    expect_eq(seen, ["a", "a", "d/", "e"], "uploads and prefixes over pages of one")


@check("list v2: MaxKeys paging by ContinuationToken returns every key once, in order",
       quick=True)
def _():
    pages = walk_v2(listed_bucket(), MaxKeys=3)
    seen = [k for p in pages for k in keys_of(p)]
    expect_eq(seen, LIST_ORDER, "keys over all pages")
    sizes = [min(3, len(LIST_ORDER) - at) for at in range(0, len(LIST_ORDER), 3)]
    expect_eq([len(keys_of(p)) for p in pages], sizes, "keys per page")
    expect(all(p["IsTruncated"] for p in pages[:-1]), "IsTruncated on all but the last page")


@check("list v2: StartAfter", quick=True)
def _():
    name = listed_bucket()
    after = S3.list_objects_v2(Bucket=name, StartAfter="a0")
    expect_eq(keys_of(after), LIST_ORDER[LIST_ORDER.index("a0") + 1:], "after a0")
    after = S3.list_objects_v2(Bucket=name, StartAfter="a/b")
    expect_eq(keys_of(after), LIST_ORDER[LIST_ORDER.index("a/b") + 1:], "after a/b")
    expect_eq(keys_of(S3.list_objects_v2(Bucket=name, StartAfter=LIST_ORDER[-1])), [],
              "after the last")


@check("list v2: paging with a delimiter, MaxKeys=1, walks keys and prefixes once")
def _():
    pages = walk_v2(listed_bucket(), Delimiter="/", MaxKeys=1)
    entries = [e for p in pages for e in keys_of(p) + prefixes_of(p)]
    want = sorted({k if "/" not in k else k.split("/")[0] + "/" for k in LIST_KEYS},
                  key=lambda k: k.encode())
    expect_eq(entries, want, "entries over all pages")
    expect(all(len(keys_of(p)) + len(prefixes_of(p)) == 1 for p in pages[:-1]),
           "one entry per page")


@check("list v2: the boto3 paginator over 25 keys, PageSize 7", quick=True)
def _():
    name = new_bucket("paginator")
    keys = [f"p/{n:03}" for n in range(25)]
    for key in keys:
        S3.put_object(Bucket=name, Key=key, Body=b"x")
    pages = list(S3.get_paginator("list_objects_v2").paginate(
        Bucket=name, Prefix="p/", PaginationConfig={"PageSize": 7}))
    expect_eq([k for p in pages for k in keys_of(p)], keys, "keys")
    expect_eq([p["KeyCount"] for p in pages], [7, 7, 7, 4], "KeyCount per page")


# ---- ListObjects (V1) -----------------------------------------------------------------


@check("list v1: MaxKeys and IsTruncated; Marker continues after a key")
def _():
    name = listed_bucket()
    page = S3.list_objects(Bucket=name, MaxKeys=2)
    expect_eq(keys_of(page), LIST_ORDER[:2], "first page")
    expect_eq(page["IsTruncated"], True, "IsTruncated on the first page")
    rest = S3.list_objects(Bucket=name, Marker=LIST_ORDER[1])
    expect_eq(keys_of(rest), LIST_ORDER[2:], "after the marker")
    expect_eq(rest["IsTruncated"], False, "IsTruncated on the last page")


@check("list v1: NextMarker with a delimiter walks keys and prefixes once")
def _():
    name = listed_bucket()
    first = S3.list_objects(Bucket=name, Delimiter="/", MaxKeys=2)
    expect_eq((keys_of(first), prefixes_of(first)), (["a"], ["a/"]), "first page")
    expect_eq(first["IsTruncated"], True, "IsTruncated")
    expect_eq(first.get("NextMarker"), "a/", "NextMarker")
    entries, marker = [], None
    for _ in range(50):
        page = S3.list_objects(Bucket=name, Delimiter="/", MaxKeys=2,
                               **({"Marker": marker} if marker else {}))
        # A page is the next entries in S3's order; its XML gives keys, then prefixes.
        entries += sorted(keys_of(page) + prefixes_of(page), key=lambda k: k.encode())
        if not page["IsTruncated"]:
            break
        marker = page.get("NextMarker")
        expect(marker, "IsTruncated without NextMarker")
    want = sorted({k if "/" not in k else k.split("/")[0] + "/" for k in LIST_KEYS},
                  key=lambda k: k.encode())
    expect_eq(entries, want, "entries over all pages")


# ---- multipart ------------------------------------------------------------------------

@fixture
def multipart_upload():
    """An upload with its three parts sent, not completed."""
    parts = [data(5 * MIB, 11), data(5 * MIB, 12), b"z"]
    name = new_bucket("multipart")
    upload = S3.create_multipart_upload(Bucket=name, Key="mp/obj", ContentType="application/x-mp",
                                        Metadata={"m": "1"})["UploadId"]
    etags = []
    for number, part in enumerate(parts, 1):
        etags.append(S3.upload_part(Bucket=name, Key="mp/obj", UploadId=upload,
                                    PartNumber=number, Body=part)["ETag"])
    return name, "mp/obj", upload, parts, etags


@fixture
def completed_multipart():
    name, key, upload, parts, etags = multipart_upload()
    done = S3.complete_multipart_upload(
        Bucket=name, Key=key, UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})
    return name, key, parts, done


@check("multipart: each part's ETag is its quoted MD5", quick=True)
def _():
    _, _, _, parts, etags = multipart_upload()
    expect_eq(etags, [quoted_md5(p) for p in parts], "part ETags")


@check("multipart: list_parts shows the three parts", quick=True)
def _():
    name, key, upload, parts, etags = multipart_upload()
    listed = S3.list_parts(Bucket=name, Key=key, UploadId=upload).get("Parts", [])
    expect_eq([(p["PartNumber"], p["Size"], p["ETag"]) for p in listed],
              [(n, len(p), e) for n, (p, e) in enumerate(zip(parts, etags), 1)], "parts")


@check("multipart: list_multipart_uploads shows the upload", quick=True)
def _():
    name, key, upload, _, _ = multipart_upload()
    uploads = S3.list_multipart_uploads(Bucket=name).get("Uploads", [])
    expect_eq([(u["Key"], u["UploadId"]) for u in uploads], [(key, upload)], "uploads")


@check("multipart: complete; the ETag is md5(part MD5s)-3", quick=True)
def _():
    _, _, parts, done = completed_multipart()
    expect_eq(done["ETag"], multipart_etag(parts), "CompleteMultipartUpload ETag")


@check("multipart: GET returns the parts' concatenation, with type and metadata", quick=True)
def _():
    name, key, parts, done = completed_multipart()
    got = S3.get_object(Bucket=name, Key=key)
    expect(got["Body"].read() == b"".join(parts), "GET returned other bytes")
    expect_eq(got["ContentLength"], sum(len(p) for p in parts), "ContentLength")
    expect_eq(got["ETag"], done["ETag"], "GET ETag")
    expect_eq(got["ContentType"], "application/x-mp", "ContentType")
    expect_eq(got["Metadata"], {"m": "1"}, "Metadata")
    expect_eq(S3.list_multipart_uploads(Bucket=name).get("Uploads", []), [],
              "uploads after completion")


@check("multipart: range reads across the parts' boundaries", quick=True)
def _():
    name, key, parts, _ = completed_multipart()
    whole, failures = b"".join(parts), []
    for first, last in [(5 * MIB - 10, 5 * MIB + 9), (10 * MIB - 5, 10 * MIB),
                        (5 * MIB - 1, 10 * MIB), (0, 10 * MIB)]:
        def one(first=first, last=last):
            got = S3.get_object(Bucket=name, Key=key, Range=f"bytes={first}-{last}")
            expect(got["Body"].read() == whole[first:last + 1], f"bytes={first}-{last} differ")
            expect_eq(got["ContentRange"], f"bytes {first}-{last}/{len(whole)}", "ContentRange")
        soft(failures, one)
    all_passed(failures)


@fixture
def small_parts_upload():
    """An upload whose part 1 is under 5 MiB, and a 1-byte part 2."""
    name = plain_bucket()
    upload = S3.create_multipart_upload(Bucket=name, Key="mp-small")["UploadId"]
    small = S3.upload_part(Bucket=name, Key="mp-small", UploadId=upload, PartNumber=1,
                           Body=data(5 * MIB - 1, 13))["ETag"]
    last = S3.upload_part(Bucket=name, Key="mp-small", UploadId=upload, PartNumber=2,
                          Body=b"b")["ETag"]
    return name, "mp-small", upload, small, last


def complete(name, key, upload, parts):
    return S3.complete_multipart_upload(
        Bucket=name, Key=key, UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in parts]})


@check("multipart: a part under 5 MiB that is not the last -> EntityTooSmall 400")
def _():
    name, key, upload, small, last = small_parts_upload()
    expect_error("EntityTooSmall", 400, complete, name=name, key=key, upload=upload,
                 parts=[(1, small), (2, last)])


@check("multipart: a wrong part ETag -> InvalidPart 400")
def _():
    name, key, upload, _, last = small_parts_upload()
    expect_error("InvalidPart", 400, complete, name=name, key=key, upload=upload,
                 parts=[(1, '"0123456789abcdef0123456789abcdef"'), (2, last)])
    expect_error("InvalidPart", 400, complete, name=name, key=key, upload=upload,
                 parts=[(7, last)])


@check("multipart: parts out of order -> InvalidPartOrder 400")
def _():
    name, key, upload, small, last = small_parts_upload()
    expect_error("InvalidPartOrder", 400, complete, name=name, key=key, upload=upload,
                 parts=[(2, last), (1, small)])


@check("multipart: a part uploaded twice and listed twice counts once, by its last entry")
def _():
    name = plain_bucket()
    upload = S3.create_multipart_upload(Bucket=name, Key="mp-twice")["UploadId"]
    put = lambda body: S3.upload_part(Bucket=name, Key="mp-twice", UploadId=upload,
                                      PartNumber=1, Body=body)["ETag"]
    old, new = put(b"old part"), put(b"new part")
    expect_error("InvalidPart", 400, complete, name=name, key="mp-twice", upload=upload,
                 parts=[(1, new), (1, old)])
    got = complete(name, "mp-twice", upload, [(1, old), (1, new)])
    expect_eq(got["ETag"], multipart_etag([b"new part"]), "ETag")
    expect_eq(read(name, "mp-twice"), b"new part", "the object")


@check("multipart: a completion listing 100,000 parts -> InvalidArgument 400; the upload "
       "still completes, or aborts")
def _():
    name = plain_bucket()
    for key in ("mp-many-complete", "mp-many-abort"):
        upload = S3.create_multipart_upload(Bucket=name, Key=key)["UploadId"]
        etag = S3.upload_part(Bucket=name, Key=key, UploadId=upload, PartNumber=1,
                              Body=b"the only part")["ETag"]
        many = [(n, etag) for n in range(1, 100_001)]
        expect_error("InvalidArgument", 400, complete, name=name, key=key, upload=upload,
                     parts=many)
        if key == "mp-many-complete":
            complete(name, key, upload, [(1, etag)])
            expect_eq(read(name, key), b"the only part", "the object")
        else:
            answer = S3.abort_multipart_upload(Bucket=name, Key=key, UploadId=upload)
            expect_eq(status_of(answer), 204, "AbortMultipartUpload status")
            expect_error("NoSuchUpload", 404, S3.list_parts, Bucket=name, Key=key,
                         UploadId=upload)


@check("multipart: after abort, upload_part and list_parts -> NoSuchUpload 404", quick=True)
def _():
    name = plain_bucket()
    upload = S3.create_multipart_upload(Bucket=name, Key="mp-abort")["UploadId"]
    S3.upload_part(Bucket=name, Key="mp-abort", UploadId=upload, PartNumber=1, Body=b"a")
    expect_eq(status_of(S3.abort_multipart_upload(Bucket=name, Key="mp-abort", UploadId=upload)),
              204, "AbortMultipartUpload status")
    expect_error("NoSuchUpload", 404, S3.upload_part, Bucket=name, Key="mp-abort",
                 UploadId=upload, PartNumber=2, Body=b"b")
    expect_error("NoSuchUpload", 404, S3.list_parts, Bucket=name, Key="mp-abort", UploadId=upload)
    expect_error("NoSuchKey", 404, S3.get_object, Bucket=name, Key="mp-abort")


@check("multipart: upload_part_copy with CopySourceRange")
def _():
    name, source = plain_bucket(), data(6 * MIB + 100, 14)
    S3.put_object(Bucket=name, Key="upc-src", Body=source)
    upload = S3.create_multipart_upload(Bucket=name, Key="upc-dst")["UploadId"]
    ranges = [(0, 5 * MIB - 1), (5 * MIB, 6 * MIB + 99)]
    etags = []
    for number, (first, last) in enumerate(ranges, 1):
        answer = S3.upload_part_copy(
            Bucket=name, Key="upc-dst", UploadId=upload, PartNumber=number,
            CopySource={"Bucket": name, "Key": "upc-src"},
            CopySourceRange=f"bytes={first}-{last}")
        etag = answer["CopyPartResult"]["ETag"]
        expect_eq(etag, quoted_md5(source[first:last + 1]), f"part {number} ETag")
        etags.append(etag)
    done = complete(name, "upc-dst", upload, list(enumerate(etags, 1)))
    expect_eq(done["ETag"], multipart_etag([source[a:b + 1] for a, b in ranges]), "ETag")
    expect(read(name, "upc-dst") == source, "the copied object differs from its source")


# ---- authentication -------------------------------------------------------------------


@fixture
def private_object():
    name = plain_bucket()
    S3.put_object(Bucket=name, Key="private", Body=b"secret data")
    return name, "private"


@check("auth: a wrong secret key -> SignatureDoesNotMatch 403", quick=True)
def _():
    name, key = private_object()
    expect_error("SignatureDoesNotMatch", 403, client(secret=SECRET + "x").get_object,
                 Bucket=name, Key=key)


@check("auth: a request signed with Date instead of X-Amz-Date is accepted, a stale one refused")
def _():
    name = plain_bucket()
    signer = client()
    # botocore signs with a Date header, and sends no X-Amz-Date, when one is present.
    signer.meta.events.register("before-call.s3.PutObject",
                                lambda params, **_: params["headers"].update({"Date": ""}))
    signer.put_object(Bucket=name, Key="date-signed", Body=b"d")
    expect_eq(read(name, "date-signed"), b"d", "the object")
    stale = client()
    stale.meta.events.register("before-call.s3.PutObject",
                               lambda params, **_: params["headers"].update({"Date": ""}))

    def restamp(request, **_):
        request.headers["Date"] = "Sat, 01 Jan 2000 00:00:00 GMT"
    stale.meta.events.register("before-send.s3.PutObject", restamp)
    expect_error(None, 403, stale.put_object, Bucket=name, Key="date-stale", Body=b"s")
    expect_error(None, 404, S3.head_object, Bucket=name, Key="date-stale")


@check("errors: every answer has an x-amz-request-id; an error's body names the same", quick=True)
def _():
    name = plain_bucket()
    url = S3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "absent"},
                                    ExpiresIn=300)
    status, headers, body = http("GET", url)
    expect_eq((status, error_code(body)), (404, "NoSuchKey"), "GET of no key")
    expect(headers.get("x-amz-request-id"), "no x-amz-request-id on an error")
    expect_eq(ET.fromstring(body).findtext("RequestId"), headers.get("x-amz-request-id"),
              "the error's RequestId")
    ids = [S3.head_bucket(Bucket=name)["ResponseMetadata"].get("RequestId") for _ in range(2)]
    expect(None not in ids and ids[0] != ids[1], f"request ids of two HEADs: {ids}")


@check("auth: an unknown access key -> InvalidAccessKeyId 403", quick=True)
def _():
    name, key = private_object()
    expect_error("InvalidAccessKeyId", 403, client(access="AKIDUNKNOWN" + RUN).get_object,
                 Bucket=name, Key=key)


@check("auth: anonymous requests -> AccessDenied 403", quick=True)
def _():
    name, key = private_object()
    anonymous = client(signature=UNSIGNED)
    failures = []
    soft(failures, expect_error, "AccessDenied", 403, anonymous.get_object, Bucket=name, Key=key)
    soft(failures, expect_error, "AccessDenied", 403, anonymous.put_object, Bucket=name,
         Key="anon", Body=b"x")
    soft(failures, expect_error, "AccessDenied", 403, anonymous.list_buckets)
    all_passed(failures)


@check("auth: a presigned GET URL works (urllib)", quick=True)
def _():
    name, key = private_object()
    url = S3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": key},
                                    ExpiresIn=300)
    status, _, body = http("GET", url)
    expect_eq((status, body), (200, b"secret data"), "presigned GET")


@check("auth: an expired presigned URL -> AccessDenied 403", quick=True)
def _():
    name, key = private_object()
    url = S3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": key},
                                    ExpiresIn=1)
    time.sleep(2)
    status, _, body = http("GET", url)
    expect_eq((status, error_code(body)), (403, "AccessDenied"), "expired presigned GET")


@check("auth: an expired presigned URL's query signed as a header -> InvalidArgument 400")
def _():
    name, key = private_object()
    url = S3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": key},
                                    ExpiresIn=1)
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    # The same canonical request, signed the same, as header authentication would have
    # it: without X-Amz-Signature in the query, its signature in Authorization.
    kept = "&".join(p for p in parts.query.split("&") if not p.startswith("X-Amz-Signature="))
    authorization = (f"AWS4-HMAC-SHA256 Credential={query['X-Amz-Credential']}, "
                     f"SignedHeaders={query['X-Amz-SignedHeaders']}, "
                     f"Signature={query['X-Amz-Signature']}")
    time.sleep(2)
    status, _, body = http("GET", urllib.parse.urlunsplit(parts._replace(query=kept)), headers={
        "Authorization": authorization, "x-amz-date": query["X-Amz-Date"],
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    expect_eq((status, error_code(body)), (400, "InvalidArgument"), "the expired URL as a header")


@check("auth: a presigned PUT URL works (urllib)")
def _():
    name = plain_bucket()
    url = S3.generate_presigned_url("put_object", Params={"Bucket": name, "Key": "presigned-put"},
                                    ExpiresIn=300)
    status, _, body = http("PUT", url, b"uploaded by URL")
    expect_eq(status, 200, f"presigned PUT ({body[:200]!r})")
    expect_eq(read(name, "presigned-put"), b"uploaded by URL", "stored bytes")


def sign(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def chunked_put(bucket, key, body, chunk=64 * 1024, tamper=False, framing="length"):
    """A PUT whose body is `aws-chunked`, each chunk signed (STREAMING-AWS4-HMAC-SHA256-
    PAYLOAD), as SDKs send streamed uploads; (status, body). The signing reproduces
    AWS's documented example (seed 4f232c43..., chunk 1 ad80c730...). `framing` is
    "length" (a Content-Length, as the SDKs send it) or "te-chunked" (no length, the body
    sent with Transfer-Encoding: chunked, as Go's HTTP client sends an empty body)."""
    url = urllib.parse.urlsplit(ENDPOINT)
    now = datetime.now(timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/{REGION}/s3/aws4_request"
    pieces = [body[i:i + chunk] for i in range(0, len(body), chunk)] + [b""]
    length = sum(len(f"{len(p):x};chunk-signature={'0' * 64}\r\n") + len(p) + 2 for p in pieces)
    path = "/" + urllib.parse.quote(f"{bucket}/{key}", safe="/~")
    headers = {
        "host": url.netloc,
        "content-encoding": "aws-chunked",
        "content-length": str(length),
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(body)),
    }
    if framing == "te-chunked":
        del headers["content-length"]
    names = sorted(headers)
    canonical = "\n".join(["PUT", path, ""] + [f"{n}:{headers[n]}" for n in names] +
                          ["", ";".join(names), headers["x-amz-content-sha256"]])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    signing = f"AWS4{SECRET}".encode()
    for part in [day, REGION, "s3", "aws4_request"]:
        signing = sign(signing, part)
    previous = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={';'.join(names)}, "
        f"Signature={previous}")
    encoded, empty = [], hashlib.sha256(b"").hexdigest()
    for piece in pieces:
        text = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous, empty,
                          hashlib.sha256(piece).hexdigest()])
        previous = hmac.new(signing, text.encode(), hashlib.sha256).hexdigest()
        if tamper and piece:  # one bit flipped after signing
            piece, tamper = bytes([piece[0] ^ 1]) + piece[1:], False
        encoded.append(f"{len(piece):x};chunk-signature={previous}\r\n".encode() + piece + b"\r\n")
    connection = new_connection(url)
    try:
        if framing == "te-chunked":
            headers["transfer-encoding"] = "chunked"
            connection.request("PUT", path, body=iter(encoded), headers=headers,
                               encode_chunked=True)
        else:
            connection.request("PUT", path, body=b"".join(encoded), headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@check("auth: an aws-chunked upload signed chunk by chunk is stored", quick=True)
def _():
    name, body = plain_bucket(), data(300_000, 15)
    status, answer = chunked_put(name, "streamed", body)
    expect_eq(status, 200, f"chunked PUT ({answer[:300]!r})")
    got = S3.get_object(Bucket=name, Key="streamed")
    expect(got["Body"].read() == body, "stored bytes differ")
    expect_eq(got["ETag"], quoted_md5(body), "ETag")


@check("auth: an aws-chunked upload with a tampered chunk -> SignatureDoesNotMatch 403")
def _():
    name = plain_bucket()
    status, answer = chunked_put(name, "tampered", data(300_000, 16), tamper=True)
    expect_eq((status, error_code(answer)), (403, "SignatureDoesNotMatch"),
              f"tampered chunked PUT ({answer[:300]!r})")
    expect_error(None, 404, S3.head_object, Bucket=name, Key="tampered")


@check("compat: a streamed upload framed with Transfer-Encoding: chunked (Go's client, "
       "an empty body) is stored with its decoded length", quick=True)
def _():
    name, failures = plain_bucket(), []
    for key, body in [("go-empty", b""), ("go-body", data(200_000, 17))]:
        status, answer = chunked_put(name, key, body, framing="te-chunked")
        soft(failures, expect_eq, status, 200, f"{key}: TE-chunked PUT ({answer[:300]!r})")
        if status == 200:
            got = S3.get_object(Bucket=name, Key=key)
            soft(failures, expect_eq, (got["ContentLength"], got["Body"].read() == body),
                 (len(body), True), f"{key}: stored length, same bytes")
    all_passed(failures)


def signed(method, path, query="", headers=None, body=b""):
    """A request signed with SigV4 in the headers by hand: its target (path and
    canonical query) and its headers, authorization included."""
    url = urllib.parse.urlsplit(ENDPOINT)
    now = datetime.now(timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/{REGION}/s3/aws4_request"
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    headers.update({"host": url.netloc, "x-amz-date": amz_date,
                    "x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}="
                               f"{urllib.parse.quote(v, safe='-_.~')}" for k, v in pairs)
    names = sorted(headers)
    canonical = "\n".join([method, path, canonical_query] +
                          [f"{n}:{str(headers[n]).strip()}" for n in names] +
                          ["", ";".join(names), headers["x-amz-content-sha256"]])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{SECRET}".encode()
    for part in [day, REGION, "s3", "aws4_request"]:
        key = sign(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return path + (f"?{canonical_query}" if canonical_query else ""), headers


def send(connection, method, path, query="", headers=None, body=b""):
    target, headers = signed(method, path, query, headers, body)
    connection.request(method, target, body=body, headers=headers)
    answer = connection.getresponse()
    return answer.status, answer.headers, answer.read()


def new_connection(url):
    if TLS:
        return HTTPSConnection(url.hostname, url.port, timeout=30, context=TLS)
    return HTTPConnection(url.hostname, url.port, timeout=30)


def connect():
    return new_connection(urllib.parse.urlsplit(ENDPOINT))


@check("list: control characters in keys are escaped (&#x1;) in a listing without "
       "encoding-type, and come back exact with encoding-type=url")
def _():
    name, failures = new_bucket("control"), []
    keys = ["ctl-\x01-a", "ctl-\x1f-b", "ctl-\x7f-c", "ctl-\t\n\r-d"]
    for key in keys:
        S3.put_object(Bucket=name, Key=key, Body=b"x")
    connection = connect()
    try:
        for query in ["list-type=2&prefix=ctl-", "prefix=ctl-"]:
            status, _, body = send(connection, "GET", f"/{name}", query)
            soft(failures, expect_eq, status, 200, f"raw listing {query}")
            raw = [b for b in [b"\x01", b"\x1f", b"\x7f", b"\t", b"\n-d"] if b in body]
            soft(failures, expect_eq, raw, [], f"raw control bytes in the listing ({query})")
            for escaped in [b"&#x1;", b"&#x1f;", b"&#x7f;", b"&#x9;&#xa;&#xd;"]:
                soft(failures, expect, escaped in body, f"{escaped!r} missing in {body[:600]!r}")
    finally:
        connection.close()
    listed = [item["Key"] for item in S3.list_objects_v2(Bucket=name)["Contents"]]
    soft(failures, expect_eq, listed, sorted(keys), "keys listed with encoding-type=url")
    for key in keys:  # here: the cleanup's listings cannot parse what S3 writes for them
        S3.delete_object(Bucket=name, Key=key)
    all_passed(failures)


@check("multipart: list_multipart_uploads orders one key's uploads by initiation and "
       "encodes names with EncodingType=url")
def _():
    name, failures = new_bucket("initiated"), []
    ids = []
    for _ in range(4):
        ids.append(S3.create_multipart_upload(Bucket=name, Key="same")["UploadId"])
        time.sleep(0.01)
    S3.create_multipart_upload(Bucket=name, Key="odd name+é")
    page = S3.list_multipart_uploads(Bucket=name, Prefix="same")
    soft(failures, expect_eq, [u["UploadId"] for u in page["Uploads"]], ids,
         "one key's uploads, in initiation order")
    initiated = [u["Initiated"] for u in page["Uploads"]]
    soft(failures, expect_eq, initiated, sorted(initiated), "Initiated times")
    paged, markers = [], {}
    for _ in range(10):
        page = S3.list_multipart_uploads(Bucket=name, Prefix="same", MaxUploads=1, **markers)
        paged += [u["UploadId"] for u in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        markers = {"KeyMarker": page["NextKeyMarker"],
                   "UploadIdMarker": page["NextUploadIdMarker"]}
    soft(failures, expect_eq, paged, ids, "pages of one")
    connection = connect()
    try:
        status, _, body = send(connection, "GET", f"/{name}", "uploads&encoding-type=url")
    finally:
        connection.close()
    soft(failures, expect_eq, status, 200, "ListMultipartUploads with encoding-type=url")
    soft(failures, expect, b"<Key>odd%20name%2B%C3%A9</Key>" in body
         and b"<EncodingType>url</EncodingType>" in body, f"encoded key in {body[:800]!r}")
    all_passed(failures)


OUT_OF_SCOPE = [
    ("server-side encryption", {"ServerSideEncryption": "AES256"}),
    ("SSE-KMS", {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "k"}),
    ("SSE-C", {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": "k" * 32}),
    ("tagging", {"Tagging": "a=b"}),
    ("object lock mode", {"ObjectLockMode": "GOVERNANCE",
                          "ObjectLockRetainUntilDate": datetime(2099, 1, 1)}),
    ("legal hold", {"ObjectLockLegalHoldStatus": "ON"}),
    ("grants", {"GrantRead": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'}),
    ("website redirect", {"WebsiteRedirectLocation": "/elsewhere"}),
]


@check("compat: encryption, tagging, object lock, grants and website redirects asked "
       "for -> NotImplemented 501, nothing stored")
def _():
    name, failures = plain_bucket(), []
    for what, extra in OUT_OF_SCOPE:
        key = f"refused-{what.replace(' ', '-')}"
        soft(failures, expect_error, "NotImplemented", 501, S3.put_object, Bucket=name,
             Key=key, Body=b"x", **extra)
        soft(failures, expect_error, "NotImplemented", 501, S3.create_multipart_upload,
             Bucket=name, Key=key, **extra)
        soft(failures, expect_error, None, 404, S3.head_object, Bucket=name, Key=key)
    soft(failures, expect_error, "NotImplemented", 501, S3.create_bucket,
         Bucket=f"{RUN}-locked", ObjectLockEnabledForBucket=True)
    soft(failures, expect_error, None, 404, S3.head_bucket, Bucket=f"{RUN}-locked")
    S3.create_bucket(Bucket=f"{RUN}-unlocked", ObjectLockEnabledForBucket=False)
    CREATED.append(f"{RUN}-unlocked")
    all_passed(failures)


@check("compat: an unknown storage class -> InvalidStorageClass 400; STANDARD is stored")
def _():
    name, failures = plain_bucket(), []
    for wrong in ["GLACIER-ISH", "standard", "REDUCED_REDUNDANCY"]:
        soft(failures, expect_error, "InvalidStorageClass", 400, S3.put_object, Bucket=name,
             Key="classy", Body=b"x", StorageClass=wrong)
    soft(failures, expect_error, None, 404, S3.head_object, Bucket=name, Key="classy")
    S3.put_object(Bucket=name, Key="classy", Body=b"x", StorageClass="STANDARD")
    listed = S3.list_objects_v2(Bucket=name, Prefix="classy")["Contents"]
    soft(failures, expect_eq, [i.get("StorageClass") for i in listed], ["STANDARD"],
         "the listed class")
    all_passed(failures)


@check("compat: an empty PUT with Expect: 100-continue is answered at once, and the "
       "connection's next request too", quick=True)
def _():
    name, failures = plain_bucket(), []
    connection = connect()
    try:
        for i in range(3):
            start = time.monotonic()
            status, _, body = send(connection, "PUT", f"/{name}/expect-{i}",
                                   headers={"expect": "100-continue", "content-length": "0"})
            took = time.monotonic() - start
            soft(failures, expect_eq, status, 200, f"empty PUT {i} ({body[:200]!r})")
            soft(failures, expect, took < 5, f"empty PUT {i} took {took:.1f} s")
            start = time.monotonic()
            status, _, body = send(connection, "GET", f"/{name}/expect-{i}")
            took = time.monotonic() - start
            soft(failures, expect_eq, (status, body), (200, b""), f"GET {i} after it")
            soft(failures, expect, took < 5, f"GET {i} after the empty PUT took {took:.1f} s")
    finally:
        connection.close()
    all_passed(failures)


# ---- the AWS CLI ----------------------------------------------------------------------

CLI_DIR = tempfile.TemporaryDirectory(prefix="s3_clients-")
CLI_CONFIG = os.path.join(CLI_DIR.name, "config")
with open(CLI_CONFIG, "w") as f:
    f.write(f"[default]\nregion = {REGION}\ns3 =\n    addressing_style = path\n")


def aws(*args, timeout=180):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
               AWS_DEFAULT_REGION=REGION, AWS_CONFIG_FILE=CLI_CONFIG,
               AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true",
               AWS_MAX_ATTEMPTS="1", AWS_RETRY_MODE="standard")
    env.pop("AWS_PROFILE", None)
    env.pop("AWS_SESSION_TOKEN", None)
    result = subprocess.run(["aws", "--endpoint-url", ENDPOINT, *args], env=env,
                            capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    expect(result.returncode == 0,
           f"aws {' '.join(args)}: exit {result.returncode}: {result.stderr.strip()[-500:]}")
    return result.stdout


@fixture
def cli_bucket():
    name = f"{RUN}-cli"
    aws("s3", "mb", f"s3://{name}")
    CREATED.append(name)
    return name


@fixture
def cli_big_file():
    body = data(20_000_000, 17)
    path = os.path.join(CLI_DIR.name, "big")
    with open(path, "wb") as f:
        f.write(body)
    return path, body


@check("cli: aws s3 mb, then aws s3 ls lists the bucket")
def _():
    name = cli_bucket()
    listed = [line.split()[-1] for line in aws("s3", "ls").splitlines() if line.strip()]
    expect(name in listed, f"{name} not in `aws s3 ls`")


@check("cli: aws s3 cp of a small file up and down; aws s3 ls shows it")
def _():
    name = cli_bucket()
    source, back = os.path.join(CLI_DIR.name, "small"), os.path.join(CLI_DIR.name, "small.back")
    with open(source, "wb") as f:
        f.write(b"small file\n")
    aws("s3", "cp", "--only-show-errors", source, f"s3://{name}/dir/small.txt")
    listing = aws("s3", "ls", f"s3://{name}/dir/")
    expect("small.txt" in listing and " 11 " in listing, f"`aws s3 ls`: {listing!r}")
    aws("s3", "cp", "--only-show-errors", f"s3://{name}/dir/small.txt", back)
    with open(back, "rb") as f:
        expect_eq(f.read(), b"small file\n", "downloaded bytes")


@check("cli: aws s3 cp of 20 MB (multipart) up and back, bytes equal")
def _():
    name, (path, body) = cli_bucket(), cli_big_file()
    back = path + ".back"
    aws("s3", "cp", "--only-show-errors", path, f"s3://{name}/big/file")
    aws("s3", "cp", "--only-show-errors", f"s3://{name}/big/file", back)
    with open(back, "rb") as f:
        expect(f.read() == body, "the downloaded 20 MB differ")


@check("cli: aws s3api head-object of the 20 MB object (size, multipart ETag)")
def _():
    name, (_, body) = cli_bucket(), cli_big_file()
    head = json.loads(aws("s3api", "head-object", "--bucket", name, "--key", "big/file"))
    expect_eq(head.get("ContentLength"), len(body), "ContentLength")
    # The CLI's parts are 8 MiB (multipart_chunksize's default): 3 parts.
    chunk = 8 * MIB
    parts = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    expect_eq(head.get("ETag"), multipart_etag(parts), "ETag")


@check("cli: aws s3 rm --recursive and aws s3 rb")
def _():
    name = cli_bucket()
    aws("s3", "rm", "--recursive", "--only-show-errors", f"s3://{name}/")
    expect_eq(S3.list_objects_v2(Bucket=name)["KeyCount"], 0, "keys left after rm")
    aws("s3", "rb", f"s3://{name}")
    expect_error(None, 404, S3.head_bucket, Bucket=name)


# ---- running --------------------------------------------------------------------------


def main():
    started = time.monotonic()
    only = os.environ.get("S3_ONLY", "")  # a substring of the names of the checks to run
    selected = [(n, fn) for n, quick, fn in CHECKS
                if (SUITE != "quick" or quick) and only in n]
    failed = []

    def run(name, fn):
        start = time.monotonic()
        try:
            fn()
            print(f"ok    {name} ({time.monotonic() - start:.1f} s)", flush=True)
        except Exception as error:  # noqa: BLE001 (a check's failure never stops the others)
            failed.append(name)
            print(f"FAIL  {name}: {describe(error)}", flush=True)

    print(f"S3 gateway {ENDPOINT}, suite {SUITE}, buckets {RUN}-*", flush=True)
    try:
        S3.list_buckets()
    except Exception as error:  # noqa: BLE001
        print(f"FAIL  the gateway answers ListBuckets: {describe(error)}", flush=True)
        print("1 checks, 1 failed", flush=True)
        return 1
    for name, fn in selected:
        if time.monotonic() - started > BUDGET_S:
            failed.append(name)
            print(f"FAIL  {name}: not run, the run's {BUDGET_S} s are spent", flush=True)
            continue
        run(name, fn)

    def cleaned():
        left = cleanup()
        expect(not left, f"buckets not deleted: {', '.join(left)}")
        still = [b["Name"] for b in S3.list_buckets().get("Buckets", [])
                 if b["Name"].startswith(RUN + "-")]
        expect(not still, f"buckets still listed: {still}")

    run("cleanup: every bucket of the run is deleted", cleaned)
    CLI_DIR.cleanup()
    print(f"{len(selected) + 1} checks, {len(failed)} failed", flush=True)
    print(f"({time.monotonic() - started:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
