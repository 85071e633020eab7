//! boto3 (the AWS SDK for Python) against the gateway: plain S3 behaviour as a third-party
//! client sees it. Needs python3 with boto3 (`python3 -m pip install boto3`; `.ci/run` installs
//! it) and fails with that message without them.

use std::process::Command;

use hipobj_gateway::Gateway;

const SCRIPT: &str = r#"
import sys, boto3, botocore
from botocore.config import Config
ep, ak, sk = sys.argv[1], sys.argv[2], sys.argv[3]
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                  region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
s3.create_bucket(Bucket="boto-bucket")
s3.head_bucket(Bucket="boto-bucket")
data = bytes((i * 7919 >> 3) & 0xff for i in range(100000))
r = s3.put_object(Bucket="boto-bucket", Key="dir/a.bin", Body=data)
assert r["ETag"].startswith('"'), r
assert s3.get_object(Bucket="boto-bucket", Key="dir/a.bin")["Body"].read() == data
g = s3.get_object(Bucket="boto-bucket", Key="dir/a.bin", Range="bytes=10-19")
assert g["ResponseMetadata"]["HTTPStatusCode"] == 206 and g["Body"].read() == data[10:20]
assert g["ContentRange"] == "bytes 10-19/100000", g["ContentRange"]
assert s3.head_object(Bucket="boto-bucket", Key="dir/a.bin")["ContentLength"] == 100000
part = 5 * 1024 * 1024
big = bytes((i * 31) & 0xff for i in range(3 * part + 1000))
up = s3.create_multipart_upload(Bucket="boto-bucket", Key="dir/big.bin")
parts = []
for n, off in enumerate(range(0, len(big), part), start=1):
    p = s3.upload_part(Bucket="boto-bucket", Key="dir/big.bin", UploadId=up["UploadId"], PartNumber=n, Body=big[off:off + part])
    parts.append({"PartNumber": n, "ETag": p["ETag"]})
done = s3.complete_multipart_upload(Bucket="boto-bucket", Key="dir/big.bin", UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
assert done["ETag"].endswith('-4"'), done
assert s3.get_object(Bucket="boto-bucket", Key="dir/big.bin")["Body"].read() == big
l = s3.list_objects_v2(Bucket="boto-bucket", Prefix="dir/", Delimiter="/")
assert [o["Key"] for o in l["Contents"]] == ["dir/a.bin", "dir/big.bin"], l
l = s3.list_objects_v2(Bucket="boto-bucket", MaxKeys=1)
assert l["IsTruncated"] and l["KeyCount"] == 1
l2 = s3.list_objects_v2(Bucket="boto-bucket", MaxKeys=1, ContinuationToken=l["NextContinuationToken"])
assert l2["Contents"][0]["Key"] == "dir/big.bin", l2
s3.delete_object(Bucket="boto-bucket", Key="dir/a.bin")
try:
    s3.get_object(Bucket="boto-bucket", Key="dir/a.bin")
    raise SystemExit("expected NoSuchKey")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "NoSuchKey", e.response
bad = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key="wrong", region_name="us-east-1",
                   config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
try:
    bad.list_objects_v2(Bucket="boto-bucket")
    raise SystemExit("expected SignatureDoesNotMatch")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "SignatureDoesNotMatch", e.response
print("boto3 ok", boto3.__version__)
"#;

#[test]
fn boto3_plain_s3() {
    let probe = Command::new("python3")
        .args(["-c", "import boto3"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs python3 with boto3 (python3 -m pip install boto3; .ci/run installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials("boto-key", "boto-secret")
        .start()
        .unwrap();
    let out = Command::new("python3")
        .args([
            "-c",
            SCRIPT,
            &format!("http://{}", gw.local_addr()),
            "boto-key",
            "boto-secret",
        ])
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "boto3 script failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("boto3 ok"));
    gw.shutdown();
}
