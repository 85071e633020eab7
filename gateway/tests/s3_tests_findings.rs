//! boto3 against a running gateway (directory mode) for what ceph/s3-tests found
//! (docs/gateway.md, "ceph/s3-tests"): ListBuckets' `CreationDate` and its `MaxBuckets` /
//! `ContinuationToken` paging (`test_buckets_list_ctime`, `test_list_buckets_paginated`),
//! GetObject's `response-*` header overrides (`test_object_raw_response_headers`) and a stored
//! `Content-Encoding` kept as sent less `aws-chunked` (`test_object_content_encoding_aws_chunked`)
//! and the CORS preflight refused as S3 refuses it without a CORS configuration
//! (`test_object_raw_get_x_amz_expires_not_expired`).
//! Needs python3 with boto3 (`python3 -m pip install boto3`).

use std::process::Command;

use hipobj_gateway::Gateway;

const SCRIPT: &str = r#"
import sys, datetime, boto3, botocore
from botocore.config import Config
ep = sys.argv[1]
cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="any-key",
                  aws_secret_access_key="any-secret", region_name="us-east-1", config=cfg)

# ListBuckets: no bucket yet, then two, paged one at a time.
before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
r = s3.list_buckets(MaxBuckets=1)
assert r["Buckets"] == [] and "ContinuationToken" not in r, r
s3.create_bucket(Bucket="bkt-one")
r = s3.list_buckets(MaxBuckets=1)
assert [b["Name"] for b in r["Buckets"]] == ["bkt-one"] and "ContinuationToken" not in r, r
s3.create_bucket(Bucket="bkt-two")
s3.create_bucket(Bucket="other")
r = s3.list_buckets()
assert [b["Name"] for b in r["Buckets"]] == ["bkt-one", "bkt-two", "other"], r
after = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
for b in r["Buckets"]:
    assert before <= b["CreationDate"] <= after, b
p1 = s3.list_buckets(MaxBuckets=2)
assert [b["Name"] for b in p1["Buckets"]] == ["bkt-one", "bkt-two"], p1
p2 = s3.list_buckets(MaxBuckets=2, ContinuationToken=p1["ContinuationToken"])
assert [b["Name"] for b in p2["Buckets"]] == ["other"] and "ContinuationToken" not in p2, p2
r = s3.list_buckets(Prefix="bkt-", MaxBuckets=1)
assert [b["Name"] for b in r["Buckets"]] == ["bkt-one"] and r["Prefix"] == "bkt-", r
r = s3.list_buckets(Prefix="bkt-", ContinuationToken=r["ContinuationToken"])
assert [b["Name"] for b in r["Buckets"]] == ["bkt-two"], r

# response-* parameters replace the stored headers on GET and HEAD.
B = "bkt-one"
s3.put_object(Bucket=B, Key="foo", Body=b"bar", ContentType="text/plain", CacheControl="max-age=5")
over = dict(ResponseCacheControl="no-cache", ResponseContentDisposition="bla",
            ResponseContentEncoding="aaa", ResponseContentLanguage="esperanto",
            ResponseContentType="foo/bar", ResponseExpires="123")
for call in (s3.get_object, s3.head_object):
    h = call(Bucket=B, Key="foo", **over)["ResponseMetadata"]["HTTPHeaders"]
    assert h["content-type"] == "foo/bar", h
    assert h["content-disposition"] == "bla", h
    assert h["content-language"] == "esperanto", h
    assert h["content-encoding"] == "aaa", h
    assert h["cache-control"] == "no-cache", h
    assert h["expires"] == "Thu, 01 Jan 1970 00:02:03 GMT", h  # boto3 sends 123 as a date
g = s3.get_object(Bucket=B, Key="foo")
assert g["ContentType"] == "text/plain" and g["CacheControl"] == "max-age=5", g
assert g["Body"].read() == b"bar"

# Content-Encoding as sent, less the aws-chunked coding.
for sent, kept in [("gzip", "gzip"), ("deflate, gzip", "deflate, gzip"),
                   ("gzip, aws-chunked", "gzip"), ("aws-chunked, gzip", "gzip"),
                   ("aws-chunked", None), ("aws-chunked, aws-chunked", None)]:
    s3.put_object(Bucket=B, Key="enc", Body=b"x", ContentEncoding=sent)
    got = s3.head_object(Bucket=B, Key="enc").get("ContentEncoding")
    assert got == kept, (sent, got)

# OPTIONS on an object is a CORS preflight, answered without a signature: no CORS here, so
# 400 BadRequest without Origin and 403 with one; the presigned GET itself still works.
import urllib.request, urllib.error
v4 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="any-key", aws_secret_access_key="any-secret",
                  region_name="us-east-1", config=cfg.merge(Config(signature_version="s3v4")))
url = v4.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "foo"}, ExpiresIn=1000)
def status(req):
    try:
        return urllib.request.urlopen(req).status, b""
    except urllib.error.HTTPError as e:
        return e.code, e.read()
code, body = status(urllib.request.Request(url, method="OPTIONS"))
assert code == 400 and b"<Code>BadRequest</Code>" in body, (code, body)
code, body = status(urllib.request.Request(url, method="OPTIONS", headers={"Origin": "http://x"}))
assert code == 403 and b"<Code>AccessForbidden</Code>" in body, (code, body)
got = status(urllib.request.Request(url))
assert got[0] == 200, (url, got)
print("s3-tests findings ok")
"#;

#[test]
fn s3_tests_findings_directory() {
    let probe = Command::new("python3")
        .args(["-c", "import boto3"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs python3 with boto3 (python3 -m pip install boto3)"
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials("any-key", "any-secret")
        .start()
        .unwrap();
    let out = Command::new("python3")
        .args(["-c", SCRIPT, &format!("http://{}", gw.local_addr())])
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .output()
        .unwrap();
    gw.shutdown();
    assert!(
        out.status.success(),
        "boto3 script failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("s3-tests findings ok"));
}
