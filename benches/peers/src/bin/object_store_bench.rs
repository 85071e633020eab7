//! Peer: object_store (Rust, Apache Arrow project), `AmazonS3Builder` with
//! `allow_http` and path-style requests against the local endpoint.

use hipobj_peers::{Args, BoxError, bench};
use object_store::ObjectStoreExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use std::sync::Arc;

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("object_store peer: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let args = Args::from_env()?;
    let (ak, sk) = Args::credentials()?;
    let store = AmazonS3Builder::new()
        .with_endpoint(&args.endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region("us-east-1")
        .with_bucket_name(&args.bucket)
        .with_access_key_id(ak)
        .with_secret_access_key(sk)
        .build()?;
    let store = Arc::new(store);
    let path = Path::from(args.key.as_str());
    let len = args.range_size;
    bench("object_store", &args, move |off: u64| {
        let (store, path) = (store.clone(), path.clone());
        async move {
            let b = store.get_range(&path, off..off + len).await?;
            Ok(b.len() as u64)
        }
    })
    .await
}
