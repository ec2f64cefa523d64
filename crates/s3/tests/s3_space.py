#!/usr/bin/env python3
"""The load of crates/cli/tests/space.rs, through boto3: one phase per run, so that the
test measures the cluster's disk between phases.

    S3_ENDPOINT=... S3_ACCESS_KEY=... S3_SECRET_KEY=... python3 s3_space.py PHASE BUCKET

Phases:
  fill       create BUCKET; store 2,000 objects of 4 KiB (small/0000..) and 20 of 8 MiB
             (large/00..), 8 at a time
  overwrite  store every small object twice more (new bytes each time)
  verify     read every object back and compare with what the last phase stored
  delete     delete every object (DeleteObjects, 1,000 at a time), then the bucket
  fill-until-full
             store 1 MiB objects (full/00000..) until the gateway answers 503 with
             "no space"; prints `stored N` (the objects acknowledged) and the refusal
  verify-full
             read back the first S3_STORED objects fill-until-full stored
  refusals   on the full cluster fill-until-full left (S3_STORED objects stored): each
             operation a client would send (PUT new and over a key, DELETE, multi-object
             DELETE, CopyObject, CreateBucket, DeleteBucket, a multipart upload's
             create, part, completion and abort); whatever each answers, the state
             after it must say the same (an error changed nothing, a success did what
             it says); prints one line per operation with its answer
  orphans    create BUCKET; 20 times two PUTs of one key at once (1 MiB each, both
             answered 200, the key then holds one of them whole); then an upload of
             two 5 MiB parts left unfinished
  put-large  one PUT of 64 MiB that sends its first 32 MiB and then waits, the rest
             unsent, until the gateway closes the connection (the test kills it)
  uploads    print `uploads: N`, the unfinished uploads of BUCKET

S3_SMALL_COUNT and S3_LARGE_COUNT change the counts of fill, overwrite and verify.

Prints one line per phase; exits 1 with the reason on any unexpected answer. The
contents are a function of (key, round), so `verify` needs no state of its own: the
round is the number of overwrites done (0, 1 or 2), given by S3_ROUND.
"""

import hashlib
import http.client
import os
import select
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

SMALL, SMALL_COUNT = 4096, int(os.environ.get("S3_SMALL_COUNT", "2000"))
LARGE, LARGE_COUNT = 8 << 20, int(os.environ.get("S3_LARGE_COUNT", "20"))
FULL = 1 << 20
WORKERS = 8


def client():
    config = Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                    retries={"total_max_attempts": 1}, max_pool_connections=WORKERS,
                    connect_timeout=30, read_timeout=120)
    return boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"],
                        aws_access_key_id=os.environ["S3_ACCESS_KEY"],
                        aws_secret_access_key=os.environ["S3_SECRET_KEY"],
                        region_name="us-east-1", config=config)


S3 = client()


def body(key, round_, size):
    """`size` bytes that depend on the key and the round (SHAKE-128 as a stream)."""
    return hashlib.shake_128(f"{key}/{round_}".encode()).digest(size)


def small_keys():
    return [f"small/{n:04}" for n in range(SMALL_COUNT)]


def large_keys():
    return [f"large/{n:02}" for n in range(LARGE_COUNT)]


def put_all(bucket, keys, size, round_):
    def put(key):
        S3.put_object(Bucket=bucket, Key=key, Body=body(key, round_, size))

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(put, keys))


def fill(bucket):
    S3.create_bucket(Bucket=bucket)
    started = time.monotonic()
    put_all(bucket, small_keys(), SMALL, 0)
    put_all(bucket, large_keys(), LARGE, 0)
    print(f"fill: {SMALL_COUNT} x {SMALL} B and {LARGE_COUNT} x {LARGE} B stored in "
          f"{time.monotonic() - started:.1f} s")


def overwrite(bucket):
    started = time.monotonic()
    for round_ in (1, 2):
        put_all(bucket, small_keys(), SMALL, round_)
    print(f"overwrite: {SMALL_COUNT} small objects stored twice more in "
          f"{time.monotonic() - started:.1f} s")


def verify(bucket):
    round_ = int(os.environ.get("S3_ROUND", "0"))
    wanted = [(k, round_, SMALL) for k in small_keys()] + [(k, 0, LARGE) for k in large_keys()]

    read_back(bucket, wanted, "verify")


def read_back(bucket, wanted, phase):
    """GETs every (key, round, size) of `wanted`; exits naming the first that differs."""

    def same(item):
        key, r, size = item
        got = S3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return key if got != body(key, r, size) else None

    with ThreadPoolExecutor(WORKERS) as pool:
        wrong = [k for k in pool.map(same, wanted) if k]
    if wrong:
        sys.exit(f"{phase}: {len(wrong)} objects differ, the first {wrong[0]}")
    print(f"{phase}: {len(wanted)} objects read back whole")


def delete(bucket):
    deleted = 0
    for page in S3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            answer = S3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            if answer.get("Errors"):
                sys.exit(f"delete: {answer['Errors'][:3]}")
            deleted += len(keys)
    S3.delete_bucket(Bucket=bucket)
    print(f"delete: {deleted} objects and the bucket deleted")


def fill_until_full(bucket):
    try:
        S3.create_bucket(Bucket=bucket)
    except ClientError as error:
        if error.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            raise
    stored = 0
    for n in range(100_000):
        key = f"full/{n:05}"
        try:
            S3.put_object(Bucket=bucket, Key=key, Body=body(key, 0, FULL))
            stored += 1
        except ClientError as error:
            e = error.response["Error"]
            status = error.response["ResponseMetadata"]["HTTPStatusCode"]
            if status == 503 and "no space" in e.get("Message", ""):
                print(f"stored {stored}")
                print(f"refused {key}: {e.get('Code')} {status} {e.get('Message')}")
                return
            raise
    sys.exit("fill-until-full: never refused")


def verify_full(bucket):
    stored = int(os.environ["S3_STORED"])
    read_back(bucket, [(f"full/{n:05}", 0, FULL) for n in range(stored)], "verify-full")


def answer(call):
    """None if `call` succeeded, else the error's code and HTTP status."""
    try:
        call()
        return None
    except ClientError as error:
        return (error.response["Error"].get("Code"),
                error.response["ResponseMetadata"]["HTTPStatusCode"])


def content(bucket, key):
    """The object's bytes, or None if there is none."""
    try:
        return S3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if error.response["Error"].get("Code") == "NoSuchKey":
            return None
        raise


def bucket_exists(bucket):
    try:
        S3.head_bucket(Bucket=bucket)
        return True
    except ClientError as error:
        if error.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return False
        raise


def said(what, error, done, undone):
    """Checks that the answer `error` (None: success) says what happened: `done` is
    whether the state is as the success would leave it, `undone` as before."""
    print(f"refusals: {what}: {'ok' if error is None else f'{error[0]} {error[1]}'}")
    if error is None and not done:
        sys.exit(f"refusals: {what} answered success and did not take effect")
    if error is not None and not undone:
        sys.exit(f"refusals: {what} answered {error} and took effect")


def refusals(bucket):
    stored = int(os.environ["S3_STORED"])
    assert stored >= 6, stored
    key = "refusal/new"
    data = body(key, 0, FULL)
    error = answer(lambda: S3.put_object(Bucket=bucket, Key=key, Body=data))
    now = content(bucket, key)
    said("PUT of a new key", error, now == data, now is None)

    old_key = "full/00000"
    old, new = body(old_key, 0, FULL), body(old_key, 1, FULL)
    error = answer(lambda: S3.put_object(Bucket=bucket, Key=old_key, Body=new))
    now = content(bucket, old_key)
    said("PUT over a key", error, now == new, now == old)

    gone = "full/00001"
    error = answer(lambda: S3.delete_object(Bucket=bucket, Key=gone))
    now = content(bucket, gone)
    said("DELETE", error, now is None, now == body(gone, 0, FULL))

    keys = ["full/00002", "full/00003"]
    result = {}

    def delete_many():
        result.update(S3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]}))
    error = answer(delete_many)
    deleted = {d["Key"] for d in result.get("Deleted", [])}
    for k in keys:
        now = content(bucket, k)
        said(f"multi-object DELETE of {k}", None if k in deleted else ("refused", 0),
             now is None, now == body(k, 0, FULL))
    if error is not None:
        said("multi-object DELETE", error, False, True)

    source, copy = "full/00004", "refusal/copy"
    error = answer(lambda: S3.copy_object(
        Bucket=bucket, Key=copy, CopySource={"Bucket": bucket, "Key": source}))
    now = content(bucket, copy)
    said("CopyObject", error, now == body(source, 0, FULL), now is None)

    made = f"{bucket}-made"
    error = answer(lambda: S3.create_bucket(Bucket=made))
    exists = bucket_exists(made)
    said("CreateBucket", error, exists, not exists)
    if exists:
        error = answer(lambda: S3.delete_bucket(Bucket=made))
        exists = bucket_exists(made)
        said("DeleteBucket", error, not exists, exists)

    upload = {}

    def create_upload():
        upload.update(S3.create_multipart_upload(Bucket=bucket, Key="refusal/multi"))
    error = answer(create_upload)
    listed = [u["UploadId"] for u in
              S3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    said("CreateMultipartUpload", error, upload.get("UploadId") in listed, not upload)
    if not upload:
        return
    upload_id = upload["UploadId"]
    part_data = body("refusal/multi", 0, 5 << 20)
    part = {}

    def upload_part():
        part.update(S3.upload_part(Bucket=bucket, Key="refusal/multi", UploadId=upload_id,
                                   PartNumber=1, Body=part_data))
    error = answer(upload_part)
    parts = S3.list_parts(Bucket=bucket, Key="refusal/multi",
                          UploadId=upload_id).get("Parts", [])
    said("UploadPart", error, [p["PartNumber"] for p in parts] == [1], parts == [])
    if part:
        error = answer(lambda: S3.complete_multipart_upload(
            Bucket=bucket, Key="refusal/multi", UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}))
        now = content(bucket, "refusal/multi")
        said("CompleteMultipartUpload", error, now == part_data, now is None)
        if error is None:
            return
    error = answer(lambda: S3.abort_multipart_upload(
        Bucket=bucket, Key="refusal/multi", UploadId=upload_id))
    listed = [u["UploadId"] for u in
              S3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    said("AbortMultipartUpload", error, upload_id not in listed, upload_id in listed)


def orphans(bucket):
    S3.create_bucket(Bucket=bucket)
    for n in range(20):
        key = f"race/{n:02}"
        bodies = [body(key, r, FULL) for r in (1, 2)]
        barrier = threading.Barrier(2)

        def put(data):
            barrier.wait()
            S3.put_object(Bucket=bucket, Key=key, Body=data)

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(put, bodies))
        got = S3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if got not in bodies:
            sys.exit(f"orphans: {key} holds neither PUT's bytes whole")
    print("orphans: 20 races of two PUTs each, every key whole")
    upload = S3.create_multipart_upload(Bucket=bucket, Key="abandoned")["UploadId"]
    for part in (1, 2):
        S3.upload_part(Bucket=bucket, Key="abandoned", UploadId=upload, PartNumber=part,
                       Body=body(f"abandoned/{part}", 0, 5 << 20))
    print("orphans: an upload of two 5 MiB parts left unfinished")


def put_large(bucket):
    """Sends half of a 64 MiB PUT and stalls, so that the object is never whole: the
    test kills the gateway once some of it is stored, whatever the machine's speed."""
    size, sent = 64 << 20, 32 << 20
    url = urllib.parse.urlsplit(S3.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "doomed"}, ExpiresIn=600))
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    connection.putrequest("PUT", f"{url.path}?{url.query}")
    connection.putheader("Content-Length", str(size))
    connection.endheaders()
    connection.send(body("doomed", 0, sent))
    readable, _, _ = select.select([connection.sock], [], [], 600)
    print("put-large: the gateway closed the connection" if readable
          else "put-large: still open after 600 s")


def uploads(bucket):
    print(f"uploads: {len(S3.list_multipart_uploads(Bucket=bucket).get('Uploads', []))}")


PHASES = {"orphans": orphans, "put-large": put_large, "uploads": uploads,
          "fill": fill, "overwrite": overwrite, "verify": verify, "delete": delete,
          "fill-until-full": fill_until_full, "verify-full": verify_full,
          "refusals": refusals}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in PHASES:
        sys.exit(f"usage: s3_space.py {{{'|'.join(PHASES)}}} BUCKET")
    try:
        PHASES[sys.argv[1]](sys.argv[2])
    except ClientError as error:
        sys.exit(f"{sys.argv[1]}: {error}")
