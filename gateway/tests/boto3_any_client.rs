//! boto3 against a running gateway for issue 32 ("any S3 client can talk to it"): the
//! numbered reproductions 1–10 of the issue and ListObjectVersions / `versionId=null` for
//! unversioned buckets, in directory mode, soft mode (the soft RDMA target attached: what
//! `hipobj serve --fabric soft` runs) and, for what the gateway itself answers there, upstream
//! mode in front of s3s-fs (reproduction 8, and ListObjectVersions answered by the gateway from
//! the listing of an upstream that has none). Needs python3 with boto3 and awscrt (`python3 -m pip install
//! boto3 awscrt`); without them the tests fail naming the install command.

#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use s3_lite::credentials::Credentials;

const SCRIPT: &str = r#"
import sys, hashlib, base64, boto3, botocore
from botocore.config import Config
ep, ak, sk, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                  region_name="us-east-1", config=cfg)
local = mode in ("directory", "soft")

def err(fn):
    try:
        fn()
    except botocore.exceptions.ClientError as e:
        return (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
    raise SystemExit("expected an error from %r" % fn)

if mode == "upstream":
    # 8: a bucket name S3 refuses is answered as S3 does, not as a gateway argument error.
    got = err(lambda: s3.create_bucket(Bucket="a"))
    assert got == (400, "InvalidBucketName"), got
    # s3s-fs has no ListObjectVersions (501): the gateway answers it from the upstream's
    # listing, as S3 does for an unversioned bucket, so s3-tests' cleanup works as shipped.
    U = "anyclient-up"
    s3.create_bucket(Bucket=U)
    for k in ["a/1", "a/2", "b"]:
        s3.put_object(Bucket=U, Key=k, Body=k.encode())
    v = s3.list_object_versions(Bucket=U)
    assert [(x["Key"], x["VersionId"], x["IsLatest"], x["Size"]) for x in v["Versions"]] == \
        [("a/1", "null", True, 3), ("a/2", "null", True, 3), ("b", "null", True, 1)], v
    d = s3.list_object_versions(Bucket=U, Delimiter="/")
    assert [p["Prefix"] for p in d["CommonPrefixes"]] == ["a/"], d
    pages = list(s3.get_paginator("list_object_versions").paginate(Bucket=U, PaginationConfig={"PageSize": 2}))
    assert [x["Key"] for p in pages for x in p.get("Versions", [])] == ["a/1", "a/2", "b"], pages
    assert err(lambda: s3.list_object_versions(Bucket="no-such-bucket-up")) == (404, "NoSuchBucket")
    objs = [{"Key": x["Key"], "VersionId": x["VersionId"]} for x in v["Versions"]]
    s3.delete_objects(Bucket=U, Delete={"Objects": objs, "Quiet": True})
    assert "Versions" not in s3.list_object_versions(Bucket=U)
    s3.delete_bucket(Bucket=U)
    print("boto3 any-client ok", mode)
    raise SystemExit(0)

B = "anyclient"
s3.create_bucket(Bucket=B)

# ListObjectVersions on an unversioned bucket: every object once, VersionId null, IsLatest.
keys = ["a/1", "a/2", "b", "c d", "pct%key", "z\n"]
for k in keys:
    s3.put_object(Bucket=B, Key=k, Body=k.encode())
v = s3.list_object_versions(Bucket=B)
assert sorted(x["Key"] for x in v["Versions"]) == sorted(keys), v
assert all(x["VersionId"] == "null" and x["IsLatest"] for x in v["Versions"]), v
assert not v["IsTruncated"] and "DeleteMarkers" not in v, v
sizes = {x["Key"]: x["Size"] for x in v["Versions"]}
assert sizes == {k: len(k.encode()) for k in keys}, sizes
d = s3.list_object_versions(Bucket=B, Delimiter="/", Prefix="")
assert [p["Prefix"] for p in d["CommonPrefixes"]] == ["a/"], d
assert sorted(x["Key"] for x in d["Versions"]) == sorted(k for k in keys if "/" not in k), d
# Paged by MaxKeys: the paginator follows NextKeyMarker / NextVersionIdMarker.
pages = list(s3.get_paginator("list_object_versions").paginate(Bucket=B, PaginationConfig={"PageSize": 2}))
assert len(pages) == 3, pages
seen = [x["Key"] for p in pages for x in p.get("Versions", [])]
assert seen == sorted(keys), seen
assert pages[0]["IsTruncated"] and pages[0]["NextVersionIdMarker"] == "null", pages[0]
one = s3.list_object_versions(Bucket=B, MaxKeys=1, KeyMarker="b", VersionIdMarker="null")
assert [x["Key"] for x in one["Versions"]] == ["c d"] and one["NextKeyMarker"] == "c d", one
assert err(lambda: s3.list_object_versions(Bucket=B, VersionIdMarker="null")) == (400, "InvalidArgument")
assert err(lambda: s3.list_object_versions(Bucket=B, KeyMarker="b", VersionIdMarker="abc")) == (400, "InvalidArgument")
assert err(lambda: s3.list_object_versions(Bucket="no-such-bucket-here")) == (404, "NoSuchBucket")

# versionId=null on object calls; any other id is a missing version.
assert s3.get_object(Bucket=B, Key="b", VersionId="null")["Body"].read() == b"b"
assert s3.head_object(Bucket=B, Key="b", VersionId="null")["ContentLength"] == 1
assert err(lambda: s3.get_object(Bucket=B, Key="b", VersionId="3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")) == (404, "NoSuchVersion")
assert err(lambda: s3.delete_object(Bucket=B, Key="b", VersionId="3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")) == (404, "NoSuchVersion")
assert s3.get_object(Bucket=B, Key="b")["Body"].read() == b"b"
s3.delete_object(Bucket=B, Key="b", VersionId="null")
assert err(lambda: s3.head_object(Bucket=B, Key="b")) == (404, "404")
# s3-tests' cleanup: list versions, delete them in batches, delete the bucket.
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "a/1", "VersionId": "null"}, {"Key": "a/2", "VersionId": "other"}]})
assert [(x["Key"], x.get("VersionId")) for x in r["Deleted"]] == [("a/1", "null")], r
assert [(x["Key"], x["Code"]) for x in r["Errors"]] == [("a/2", "NoSuchVersion")], r
assert s3.get_object(Bucket=B, Key="a/2")["Body"].read() == b"a/2"

# 4: a v1 listing's Prefix is the raw prefix (boto3 sends encoding-type=url and does not
# decode Prefix in v1).
l = s3.list_objects(Bucket=B, Prefix="z\n")
assert l["Prefix"] == "z\n", l
assert [o["Key"] for o in l["Contents"]] == ["z\n"], l

# 5: PUT If-None-Match naming the current ETag is 412; another ETag lets the PUT through.
etag = s3.put_object(Bucket=B, Key="inm", Body=b"bar")["ETag"]
def put_with_inm(value, body):
    c = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                     region_name="us-east-1", config=cfg)
    c.meta.events.register("before-call.s3.PutObject",
                           lambda **kw: kw["params"]["headers"].update({"If-None-Match": value}))
    return c.put_object(Bucket=B, Key="inm", Body=body)
assert err(lambda: s3.put_object(Bucket=B, Key="inm", Body=b"zar", IfNoneMatch=etag)) == (412, "PreconditionFailed")
assert err(lambda: put_with_inm(etag.strip('"'), b"zar")) == (412, "PreconditionFailed")
assert s3.get_object(Bucket=B, Key="inm")["Body"].read() == b"bar"
put_with_inm("ABCORZ", b"zar")
assert s3.get_object(Bucket=B, Key="inm")["Body"].read() == b"zar"

# 1: UploadPartCopy with a range past the source's end is 416 InvalidRange.
s3.put_object(Bucket=B, Key="five", Body=b"12345")
up = s3.create_multipart_upload(Bucket=B, Key="dest")["UploadId"]
got = err(lambda: s3.upload_part_copy(Bucket=B, Key="dest", UploadId=up, PartNumber=1,
                                      CopySource={"Bucket": B, "Key": "five"}, CopySourceRange="bytes=0-21"))
assert got == (416, "InvalidRange"), got
p = s3.upload_part_copy(Bucket=B, Key="dest", UploadId=up, PartNumber=1,
                        CopySource={"Bucket": B, "Key": "five"}, CopySourceRange="bytes=0-4")
s3.abort_multipart_upload(Bucket=B, Key="dest", UploadId=up)

# 2: a whole-object checksum on Complete that does not match is 400 BadDigest, and the upload
# stays open; the right composite value (with its -N) completes it.
body = b"A" * 1024
up = s3.create_multipart_upload(Bucket=B, Key="sha", ChecksumAlgorithm="SHA256")["UploadId"]
part = s3.upload_part(Bucket=B, Key="sha", UploadId=up, PartNumber=1, Body=body, ChecksumAlgorithm="SHA256")
listed = {"Parts": [{"ETag": part["ETag"], "ChecksumSHA256": part["ChecksumSHA256"], "PartNumber": 1}]}
got = err(lambda: s3.complete_multipart_upload(Bucket=B, Key="sha", UploadId=up, ChecksumSHA256="bad", MultipartUpload=listed))
assert got == (400, "BadDigest"), got
composite = base64.b64encode(hashlib.sha256(hashlib.sha256(body).digest()).digest()).decode() + "-1"
assert composite == "Ok6Cs5b96ux6+MWQkJO7UBT5sKPBeXBLwvj/hK89smg=-1", composite
done = s3.complete_multipart_upload(Bucket=B, Key="sha", UploadId=up, ChecksumSHA256=composite, MultipartUpload=listed)
assert done["ChecksumSHA256"] == composite, done

# 3: the same Complete sent again is 200 with the same answer.
again = s3.complete_multipart_upload(Bucket=B, Key="sha", UploadId=up, ChecksumSHA256=composite, MultipartUpload=listed)
assert (again["ETag"], again["ChecksumSHA256"]) == (done["ETag"], done["ChecksumSHA256"]), again
assert err(lambda: s3.complete_multipart_upload(Bucket=B, Key="sha", UploadId="0" * 32, MultipartUpload=listed)) == (404, "NoSuchUpload")

# 6: PartNumber past a one-part object's only part is 400 InvalidPart; part 1 is the object.
s3.put_object(Bucket=B, Key="single", Body=b"body")
assert err(lambda: s3.get_object(Bucket=B, Key="single", PartNumber=2)) == (400, "InvalidPart")
assert s3.get_object(Bucket=B, Key="single", PartNumber=1)["Body"].read() == b"body"

# 7 and 10: a three-part object: GetObjectAttributes has PartsCount; GET of part N has the
# part's checksum and the checksum type.
size = 5 * 1024 * 1024
bodies = [bytes([65 + i]) * size for i in range(2)] + [b"C" * 1024]
for alg, kind in (("SHA256", "COMPOSITE"), ("CRC64NVME", "FULL_OBJECT"), ("CRC32", "FULL_OBJECT")):
    key = "three-" + alg
    up = s3.create_multipart_upload(Bucket=B, Key=key, ChecksumAlgorithm=alg, ChecksumType=kind)["UploadId"]
    parts = []
    for n, b in enumerate(bodies, start=1):
        r = s3.upload_part(Bucket=B, Key=key, UploadId=up, PartNumber=n, Body=b, ChecksumAlgorithm=alg)
        parts.append({"ETag": r["ETag"], "PartNumber": n, "Checksum" + alg: r["Checksum" + alg]})
    s3.complete_multipart_upload(Bucket=B, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
    a = s3.get_object_attributes(Bucket=B, Key=key, ObjectAttributes=["ObjectParts"])
    assert a["ObjectParts"]["TotalPartsCount"] == 3, a
    for n, b in enumerate(bodies, start=1):
        g = s3.get_object(Bucket=B, Key=key, PartNumber=n, ChecksumMode="ENABLED")
        assert g["Body"].read() == b and g["PartsCount"] == 3, (alg, n)
        assert g["ChecksumType"] == kind, (alg, n, g)
        assert g["Checksum" + alg] == parts[n - 1]["Checksum" + alg], (alg, n, g)
    assert err(lambda: s3.get_object(Bucket=B, Key=key, PartNumber=4)) == (400, "InvalidPart")

# 9: a Complete listing part 1 twice takes the last entry (the part uploaded last).
up = s3.create_multipart_upload(Bucket=B, Key="resend")["UploadId"]
first = s3.upload_part(Bucket=B, Key="resend", UploadId=up, PartNumber=1, Body=b"B" * 8)
last = s3.upload_part(Bucket=B, Key="resend", UploadId=up, PartNumber=1, Body=b"A" * 8)
s3.complete_multipart_upload(Bucket=B, Key="resend", UploadId=up, MultipartUpload={"Parts": [
    {"ETag": first["ETag"], "PartNumber": 1}, {"ETag": last["ETag"], "PartNumber": 1}]})
assert s3.get_object(Bucket=B, Key="resend")["Body"].read() == b"A" * 8
up = s3.create_multipart_upload(Bucket=B, Key="order")["UploadId"]
one = s3.upload_part(Bucket=B, Key="order", UploadId=up, PartNumber=1, Body=b"x")
two = s3.upload_part(Bucket=B, Key="order", UploadId=up, PartNumber=2, Body=b"y")
got = err(lambda: s3.complete_multipart_upload(Bucket=B, Key="order", UploadId=up, MultipartUpload={"Parts": [
    {"ETag": two["ETag"], "PartNumber": 2}, {"ETag": one["ETag"], "PartNumber": 1}]}))
assert got == (400, "InvalidPartOrder"), got

# Clean up the way s3-tests does, as shipped: versions listed, deleted in batches, bucket gone.
up_ids = [(u["Key"], u["UploadId"]) for u in s3.list_multipart_uploads(Bucket=B).get("Uploads", [])]
for k, u in up_ids:
    s3.abort_multipart_upload(Bucket=B, Key=k, UploadId=u)
kw = {"Bucket": B, "MaxKeys": 3}
while True:
    page = s3.list_object_versions(**kw)
    objs = [{"Key": o["Key"], "VersionId": o["VersionId"]} for o in page.get("Versions", [])]
    if objs:
        r = s3.delete_objects(Bucket=B, Delete={"Objects": objs, "Quiet": True})
        assert not r.get("Errors"), r
    if not page["IsTruncated"]:
        break
    kw["KeyMarker"] = page.get("NextKeyMarker")
    kw["VersionIdMarker"] = page.get("NextVersionIdMarker")
s3.delete_bucket(Bucket=B)
print("boto3 any-client ok", mode)
"#;

fn require_boto3() {
    let probe = Command::new("python3")
        .args(["-c", "import boto3, awscrt"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs python3 with boto3 and awscrt (python3 -m pip install boto3 awscrt; \
         .ci/run installs them)"
    );
}

fn run_script(addr: SocketAddr, mode: &str) {
    let out = Command::new("python3")
        .args([
            "-c",
            SCRIPT,
            &format!("http://{addr}"),
            "any-key",
            "any-secret",
            mode,
        ])
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "boto3 script failed ({mode}):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("boto3 any-client ok"));
}

#[test]
fn boto3_any_client_directory() {
    require_boto3();
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials("any-key", "any-secret")
        .start()
        .unwrap();
    run_script(gw.local_addr(), "directory");
    gw.shutdown();
}

#[test]
fn boto3_any_client_soft() {
    require_boto3();
    let dir = tempfile::tempdir().unwrap();
    let target = RcTarget::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        RcLimits::default(),
    )
    .unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials("any-key", "any-secret")
        .rdma_target(target)
        .start()
        .unwrap();
    run_script(gw.local_addr(), "soft");
    gw.shutdown();
}

#[test]
fn boto3_any_client_upstream() {
    require_boto3();
    let up = s3s_fs::S3sFs::start();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .upstream(
            up.endpoint_url(),
            Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY),
            "us-east-1",
        )
        .credentials("any-key", "any-secret")
        .start()
        .unwrap();
    run_script(gw.local_addr(), "upstream");
    gw.shutdown();
}
