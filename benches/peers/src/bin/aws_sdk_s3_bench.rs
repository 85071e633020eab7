//! Peer: aws-sdk-s3 (Rust, tokio), as a user would configure it against a
//! local S3-compatible server: static credentials, path-style, custom endpoint.
//! Range-gets collect the whole body before the op counts as done.

use aws_sdk_s3::config::{Credentials, Region, ResponseChecksumValidation};
use hipobj_peers::{Args, BoxError, bench};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("aws-sdk-s3 peer: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let args = Args::from_env()?;
    let (ak, sk) = Args::credentials()?;
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(ak, sk, None, None, "static"))
        .endpoint_url(&args.endpoint)
        .load()
        .await;
    let conf = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(true)
        // A ranged GET has no whole-object checksum to validate; keep the
        // SDK from trying (it is WhenSupported by default).
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    let client = aws_sdk_s3::Client::from_conf(conf);
    let (bucket, key, len) = (args.bucket.clone(), args.key.clone(), args.range_size);
    bench("aws-sdk-s3", &args, move |off: u64| {
        let (client, bucket, key) = (client.clone(), bucket.clone(), key.clone());
        async move {
            let resp = client
                .get_object()
                .bucket(bucket)
                .key(key)
                .range(format!("bytes={}-{}", off, off + len - 1))
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "get_object at {off}: {}",
                        aws_sdk_s3::error::DisplayErrorContext(e)
                    )
                })?;
            let body = resp.body.collect().await?.into_bytes();
            Ok(body.len() as u64)
        }
    })
    .await
}
