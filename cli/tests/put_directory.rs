//! `hipobj put ./dir s3://b/` names the path it cannot upload (it once said only `read the
//! source file: Is a directory`), before any request: the endpoint here is a closed port.

#[path = "support/cli.rs"]
mod cli;

#[test]
fn put_of_a_directory_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("weights");
    std::fs::create_dir(&sub).unwrap();
    let out = cli::hipobj(
        "http://127.0.0.1:9",
        "k",
        "s",
        &["put", sub.to_str().unwrap(), "s3://bucket/"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "hipobj: error: {}: is a directory; put uploads one file (name a file in it, or pass --recursive)",
            sub.display()
        )
    );
}
