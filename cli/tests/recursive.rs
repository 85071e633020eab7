//! `put --recursive` and `get --recursive` (aws `cp --recursive`) against s3s-fs: a tree goes
//! up file by file under a prefix and comes back byte for byte under another directory. (Keys
//! that would leave the destination, which s3s-fs cannot hold, are the unit tests' job:
//! `cli/src/recursive.rs`.)

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

#[test]
fn a_tree_goes_up_and_comes_back_byte_for_byte() {
    let server = S3sFs::start();
    server.create_bucket_dir("trees");
    let ep = server.endpoint_url();
    let run = |args: &[&str]| cli::hipobj(&ep, ACCESS_KEY, SECRET_KEY, args);
    let src = tempfile::tempdir().unwrap();
    let files = [
        ("a.bin", cli::random_bytes(70_000, 1)),
        ("sub/b.bin", cli::random_bytes(1, 2)),
        ("sub/deeper/c.bin", cli::random_bytes(300_000, 3)),
        ("empty", Vec::new()),
    ];
    for (rel, data) in &files {
        let p = src.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    let args = [
        "put",
        "--recursive",
        src.path().to_str().unwrap(),
        "s3://trees/model",
        "--json",
    ];
    cli::succeeded(&args, run(&args));
    // The keys are the prefix plus the relative paths.
    let ls = ["ls", "--recursive", "s3://trees/model/"];
    let listing = String::from_utf8(cli::succeeded(&ls, run(&ls))).unwrap();
    for (rel, _) in &files {
        assert!(
            listing.contains(&format!("model/{rel}")),
            "{rel} missing in:\n{listing}"
        );
    }
    let dst = tempfile::tempdir().unwrap();
    let out = dst.path().join("copy");
    let args = [
        "get",
        "--recursive",
        "s3://trees/model/",
        out.to_str().unwrap(),
    ];
    cli::succeeded(&args, run(&args));
    for (rel, data) in &files {
        assert_eq!(&std::fs::read(out.join(rel)).unwrap(), data, "{rel}");
    }
    // Without --recursive a directory is still refused, and naming a file is refused with it.
    let file = src.path().join("a.bin");
    let args = [
        "put",
        "--recursive",
        file.to_str().unwrap(),
        "s3://trees/x/",
    ];
    let o = run(&args);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a directory"));
}
