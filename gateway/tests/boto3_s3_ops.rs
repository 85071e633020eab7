//! boto3 (the AWS SDK for Python) against both gateway modes for what issue 17 names:
//! list-buckets, list-objects (v1 and v2), delete-objects, copy-object, conditional put/get,
//! multipart with metadata for each checksum algorithm, ListMultipartUploads, ListParts and a
//! conditional CompleteMultipartUpload. In upstream mode the gateway
//! answers what the upstream (s3s-fs) answers, so the script checks there only what
//! s3s-fs itself implements (bytes, metadata, listings, deletes, copies). Needs python3 with
//! boto3 and awscrt (`python3 -m pip install boto3 awscrt`; `.ci/run` installs them): without
//! them the tests fail naming the install command.

#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::process::Command;

use hipobj_gateway::Gateway;
use s3_lite::credentials::Credentials;

const SCRIPT: &str = r#"
import sys, boto3, botocore
from botocore.config import Config
ep, ak, sk, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                  region_name="us-east-1", config=cfg)
directory = mode == "directory"

def code(fn):
    try:
        fn()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    raise SystemExit("expected an error from %r" % fn)

B = "ops-bucket"
s3.create_bucket(Bucket=B)
s3.create_bucket(Bucket="ops-other")
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
assert B in names and "ops-other" in names, names

keys = ["a/1", "a/2", "b", "pct%key", "sp ace"]
for k in keys:
    s3.put_object(Bucket=B, Key=k, Body=k.encode())

# ListObjects v1 and v2, with a delimiter, markers and paginators.
v1 = s3.list_objects(Bucket=B)
assert sorted(o["Key"] for o in v1["Contents"]) == sorted(keys), v1
d = s3.list_objects(Bucket=B, Delimiter="/", MaxKeys=1)
assert d["IsTruncated"] and [p["Prefix"] for p in d["CommonPrefixes"]] == ["a/"], d
assert d["NextMarker"] == "a/", d
d2 = s3.list_objects(Bucket=B, Delimiter="/", Marker=d["NextMarker"])
assert [o["Key"] for o in d2["Contents"]] == ["b", "pct%key", "sp ace"], d2
seen = [o["Key"] for page in s3.get_paginator("list_objects").paginate(Bucket=B, PaginationConfig={"PageSize": 2}) for o in page["Contents"]]
assert sorted(seen) == sorted(keys), seen
seen = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B, PaginationConfig={"PageSize": 2}) for o in page["Contents"]]
assert sorted(seen) == sorted(keys), seen
l = s3.list_objects_v2(Bucket=B, Prefix="pct%")
assert [o["Key"] for o in l["Contents"]] == ["pct%key"], l
if directory:
    z = s3.list_objects_v2(Bucket=B, MaxKeys=0)
    assert not z["IsTruncated"] and "Contents" not in z, z

# CopyObject, metadata kept (COPY) or replaced (REPLACE).
s3.put_object(Bucket=B, Key="src", Body=b"copy source", Metadata={"colour": "blue"}, ContentType="text/plain")
s3.copy_object(Bucket="ops-other", Key="dst", CopySource={"Bucket": B, "Key": "src"})
g = s3.get_object(Bucket="ops-other", Key="dst")
assert g["Body"].read() == b"copy source" and g["Metadata"] == {"colour": "blue"}, g
s3.copy_object(Bucket=B, Key="dst2", CopySource={"Bucket": B, "Key": "src"}, MetadataDirective="REPLACE", Metadata={"colour": "red"})
assert s3.head_object(Bucket=B, Key="dst2")["Metadata"] == {"colour": "red"}

# Conditional GET and PUT.
etag = s3.head_object(Bucket=B, Key="src")["ETag"]
if directory:
    assert code(lambda: s3.get_object(Bucket=B, Key="src", IfNoneMatch=etag)) == "304"
    assert code(lambda: s3.get_object(Bucket=B, Key="src", IfMatch='"0000"')) == "PreconditionFailed"
    assert s3.get_object(Bucket=B, Key="src", IfMatch=etag)["Body"].read() == b"copy source"
    assert code(lambda: s3.put_object(Bucket=B, Key="src", Body=b"x", IfNoneMatch="*")) == "PreconditionFailed"
    s3.put_object(Bucket=B, Key="fresh", Body=b"x", IfNoneMatch="*")
    assert code(lambda: s3.put_object(Bucket=B, Key="src", Body=b"x", IfMatch='"0000"')) == "PreconditionFailed"
    assert s3.get_object(Bucket=B, Key="src")["Body"].read() == b"copy source"
    s3.put_object(Bucket=B, Key="cached", Body=b"c", CacheControl="max-age=9", ContentDisposition="inline", ContentLanguage="fr")
    h = s3.head_object(Bucket=B, Key="cached")
    assert (h["CacheControl"], h["ContentDisposition"], h["ContentLanguage"]) == ("max-age=9", "inline", "fr"), h

# Multipart with metadata, once per checksum algorithm.
part = 5 * 1024 * 1024
data = bytes((i * 131) & 0xff for i in range(part)) + b"last part"
import awscrt  # botocore computes CRC32C and CRC64NVME only with it
algorithms = ["CRC32", "SHA1", "SHA256", "CRC32C", "CRC64NVME"]
for alg in algorithms:
    key = "mp-" + alg
    up = s3.create_multipart_upload(Bucket=B, Key=key, Metadata={"alg": alg.lower()}, ChecksumAlgorithm=alg)
    parts = []
    for n, off in enumerate((0, part), start=1):
        p = s3.upload_part(Bucket=B, Key=key, UploadId=up["UploadId"], PartNumber=n, Body=data[off:off + part], ChecksumAlgorithm=alg)
        entry = {"PartNumber": n, "ETag": p["ETag"]}
        if ("Checksum" + alg) in p:
            entry["Checksum" + alg] = p["Checksum" + alg]
        elif directory:
            raise SystemExit("UploadPart did not return Checksum%s: %r" % (alg, p))
        parts.append(entry)
    done = s3.complete_multipart_upload(Bucket=B, Key=key, UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
    h = s3.head_object(Bucket=B, Key=key, ChecksumMode="ENABLED")
    assert h["Metadata"] == {"alg": alg.lower()}, (alg, h)
    assert h["ContentLength"] == len(data)
    if directory:
        value = h.get("Checksum" + alg)
        assert value, (alg, h)
        if alg == "CRC64NVME":
            assert h["ChecksumType"] == "FULL_OBJECT" and "-" not in value, (alg, h)
        else:
            assert h["ChecksumType"] == "COMPOSITE" and value.endswith("-2"), (alg, h)
            assert done["Checksum" + alg] == value, (alg, done)
    got = s3.get_object(Bucket=B, Key=key, ChecksumMode="ENABLED")["Body"].read()
    assert got == data, alg

# ListMultipartUploads, ListParts (with paginators) and a conditional Complete.
if directory:
    ups = [s3.create_multipart_upload(Bucket=B, Key=k)["UploadId"] for k in ["up/1", "up/2", "up-x"]]
    listed = [(u["Key"], u["UploadId"]) for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=B, PaginationConfig={"PageSize": 1}) for u in page.get("Uploads", [])]
    assert listed == list(zip(["up-x", "up/1", "up/2"], [ups[2], ups[0], ups[1]])), listed
    rolled = s3.list_multipart_uploads(Bucket=B, Delimiter="/")
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["up/"], rolled
    assert [u["Key"] for u in rolled["Uploads"]] == ["up-x"], rolled
    for n in (1, 2, 3):
        s3.upload_part(Bucket=B, Key="up/1", UploadId=ups[0], PartNumber=n, Body=b"p%d" % n)
    parts = [p for page in s3.get_paginator("list_parts").paginate(Bucket=B, Key="up/1", UploadId=ups[0], PaginationConfig={"PageSize": 2}) for p in page["Parts"]]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 2), (2, 2), (3, 2)], parts
    for k, u in zip(["up/1", "up/2"], ups):
        s3.abort_multipart_upload(Bucket=B, Key=k, UploadId=u)
    one = s3.upload_part(Bucket=B, Key="up-x", UploadId=ups[2], PartNumber=1, Body=b"only part")
    done = {"Parts": [{"PartNumber": 1, "ETag": one["ETag"]}]}
    s3.put_object(Bucket=B, Key="up-x", Body=b"already here")
    assert code(lambda: s3.complete_multipart_upload(Bucket=B, Key="up-x", UploadId=ups[2], MultipartUpload=done, IfNoneMatch="*")) == "PreconditionFailed"
    assert code(lambda: s3.complete_multipart_upload(Bucket=B, Key="up-x", UploadId=ups[2], MultipartUpload=done, IfMatch='"0000"')) == "PreconditionFailed"
    etag = s3.head_object(Bucket=B, Key="up-x")["ETag"]
    s3.complete_multipart_upload(Bucket=B, Key="up-x", UploadId=ups[2], MultipartUpload=done, IfMatch=etag)
    assert s3.get_object(Bucket=B, Key="up-x")["Body"].read() == b"only part"
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=B)

# DeleteObjects, then the bucket is empty.
everything = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B) for o in page.get("Contents", [])]
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in everything]})
assert sorted(x["Key"] for x in r["Deleted"]) == sorted(everything), r
assert not r.get("Errors"), r
assert s3.list_objects_v2(Bucket=B)["KeyCount"] == 0
r = s3.delete_objects(Bucket="ops-other", Delete={"Objects": [{"Key": "dst"}], "Quiet": True})
assert not r.get("Errors"), r
if directory:
    assert not r.get("Deleted"), r  # s3s-fs lists deleted keys even when Quiet
print("boto3 ops ok", mode)
"#;

/// The tests need boto3 and awscrt; without them they fail with the install command.
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

fn run_script(addr: std::net::SocketAddr, mode: &str) {
    let out = Command::new("python3")
        .args([
            "-c",
            SCRIPT,
            &format!("http://{addr}"),
            "boto-key",
            "boto-secret",
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
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("boto3 ops ok"));
}

#[test]
fn boto3_s3_ops_directory() {
    require_boto3();
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials("boto-key", "boto-secret")
        .start()
        .unwrap();
    run_script(gw.local_addr(), "directory");
    gw.shutdown();
}

#[test]
fn boto3_s3_ops_upstream() {
    require_boto3();
    let up = s3s_fs::S3sFs::start();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .upstream(
            up.endpoint_url(),
            Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY),
            "us-east-1",
        )
        .credentials("boto-key", "boto-secret")
        .start()
        .unwrap();
    run_script(gw.local_addr(), "upstream");
    gw.shutdown();
}
