//! Fuzz bodies for the gateway's own parsers of untrusted request input
//! (`fuzz/fuzz_targets/gateway_request_parts.rs` is a one-liner into this). Not a stable API.

use crate::backend::ObjectInfo;
use crate::backend::{PartEntry, UploadEntry};
use crate::ops::conditions::Conditions;
use crate::ops::multipart_list::{self, Listed, UploadQuery};
use crate::ops::{copy, delete_objects, meta};
use crate::{time, xml};

/// The request documents and header values the gateway parses itself: the
/// CompleteMultipartUpload and Delete documents, `x-amz-copy-source` and its range, HTTP
/// dates, stored metadata headers, conditional headers, the soft-features list of a pairing
/// request and the ListParts / ListMultipartUploads paging of a query (the first line). Each
/// ends in a value or a typed error, never a panic; cross-checks: a Delete document yields
/// 1..=1000 keys, a parsed copy source names a non-empty bucket and key, a parsed date formats
/// back to itself when it is in canonical form, stored user metadata stays within its limit, a
/// soft-features list names a feature only as a whole item.
pub fn request_parts(data: &[u8]) {
    if let Ok(parts) = xml::parse_complete(data) {
        assert!(parts.len() <= s3_lite::s3::MAX_PARTS as usize);
    }
    if let Ok(req) = delete_objects::parse(data) {
        assert!((1..=delete_objects::MAX_KEYS).contains(&req.keys.len()));
        assert_eq!(req.versions.len(), req.keys.len());
    }
    let text = String::from_utf8_lossy(data);
    if let Ok(src) = copy::parse_source(&text) {
        assert!(!src.bucket.is_empty() && !src.key.is_empty());
    }
    if let Ok(r) = copy::parse_source_range(&text) {
        assert!(
            matches!(r, s3_lite::s3::ByteRange::Inclusive(a, b) if a <= b),
            "a copy-source range has both bounds, in order: {r:?}"
        );
    }
    if let Some(secs) = time::parse_http_date(&text)
        && text == time::http_date(secs)
    {
        assert_eq!(time::parse_http_date(&time::http_date(secs)), Some(secs));
    }
    let headers: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    if let Ok(stored) = meta::stored_headers(&headers) {
        let user: usize = stored
            .iter()
            .filter_map(|(n, v)| n.strip_prefix("x-amz-meta-").map(|r| r.len() + v.len()))
            .sum();
        assert!(user <= meta::MAX_USER_METADATA);
    }
    let header = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    if let Some(v) = header(s3_lite::rdma::pairing::RDMA_SOFT_FEATURES) {
        let ack_later = s3_lite::rdma::pairing::SOFT_ACK_LATER;
        if s3_lite::rdma::pairing::soft_features_name(v, ack_later) {
            assert!(
                v.split(',').any(|item| item.trim() == ack_later),
                "{v:?} names {ack_later} only inside an item"
            );
        }
    }
    signed_chunks_body(data);
    if let Some(Ok(query)) = text.lines().next().map(crate::route::Query::parse) {
        multipart_pages(&query);
    }
    let c = Conditions::from_headers(header, "");
    let info = ObjectInfo {
        etag: "\"0123\"".into(),
        last_modified: 1_700_000_000,
        ..Default::default()
    };
    let _ = c.check_read(&info);
    let _ = c.check_copy_source(&info);
    let _ = c.check_write(Some(&info), "k");
    let _ = c.check_write(None, "k");
}

/// ListParts and ListMultipartUploads paging for a query from the input, over fixed parts and
/// uploads: a page never holds more than asked, parts come after the marker in ascending
/// order, uploads start with the prefix, come after the key marker and in listing order, and
/// a truncated page is never empty.
fn multipart_pages(query: &crate::route::Query) {
    if let Ok((max, marker)) = multipart_list::part_params(query) {
        let parts: Vec<PartEntry> = [1, 2, 3, 7, 10_000]
            .into_iter()
            .map(|part_number| PartEntry {
                part_number,
                ..Default::default()
            })
            .collect();
        let (page, truncated) = multipart_list::part_page(&parts, marker, max);
        assert!(page.len() <= max as usize);
        assert!(page.iter().all(|p| p.part_number > marker));
        assert!(page.windows(2).all(|w| w[0].part_number < w[1].part_number));
        assert!(!truncated || !page.is_empty());
    }
    if let Ok(q) = UploadQuery::parse(query) {
        let mut uploads: Vec<UploadEntry> = ["a", "a/b", "a/c", "b", "b", "c/d/e", "é"]
            .iter()
            .enumerate()
            .map(|(i, k)| UploadEntry {
                key: (*k).to_owned(),
                upload_id: format!("{i:032x}"),
                initiated: 7 - i as u64,
                ..Default::default()
            })
            .collect();
        multipart_list::sort_uploads(&mut uploads);
        let page = multipart_list::upload_page(&uploads, &q);
        assert!(page.entries.len() <= q.max_uploads as usize);
        assert!(!page.truncated || !page.entries.is_empty());
        for e in &page.entries {
            let name = match e {
                Listed::Upload(u) => u.key.as_str(),
                Listed::Prefix(p) => p.as_str(),
            };
            assert!(name.starts_with(q.prefix.as_str()));
            assert!(q.key_marker.is_empty() || name >= q.key_marker.as_str());
        }
    }
}

/// A signed aws-chunked body decoded with a fixed key, seed and date, fed in two pieces: it
/// ends in the payload or a typed error, never a panic, and never yields more bytes than it
/// was given.
fn signed_chunks_body(data: &[u8]) {
    use crate::body::BodySource;
    use crate::ops::signed_chunks::{ChunkSigning, SignedChunks};

    struct Two<'d>(&'d [u8], &'d [u8], u8);
    impl BodySource for Two<'_> {
        fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
            self.2 += 1;
            Ok(match self.2 {
                1 => Some(self.0),
                2 => Some(self.1),
                _ => None,
            })
        }
    }
    let Ok(signer) = s3_lite::sigv4::Signer::new(
        s3_lite::credentials::Credentials::new("AK", "SK"),
        "us-east-1",
        "s3",
    ) else {
        return;
    };
    let Ok(date) = s3_lite::sigv4::AmzDate::from_unix_secs(1_700_000_000) else {
        return;
    };
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let (a, b) = data.split_at(cut);
    let mut src = Two(a, b, 0);
    let signing = ChunkSigning {
        signer,
        date,
        seed: "0".repeat(64),
        trailer: data.len() % 2 == 1,
    };
    let mut dec = SignedChunks::new(&mut src, signing);
    let mut total = 0usize;
    while let Ok(Some(piece)) = dec.next_chunk() {
        total += piece.len();
    }
    assert!(total <= data.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed of the fuzz target runs through the body.
    #[test]
    fn seeds_run_clean() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/seeds/gateway_request_parts");
        let mut seeds = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let seed = std::fs::read(entry.unwrap().path()).unwrap();
            request_parts(&seed);
            seeds.push(seed);
        }
        assert!(seeds.len() >= 4, "seeds in {}", dir.display());
        // Cheap deterministic mutations of every seed (byte flips, truncations), so the body
        // is exercised beyond the seeds even where cargo-fuzz is not run.
        let mut x: u32 = 0x9e37_79b9;
        for seed in &seeds {
            for _ in 0..300 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let mut m = seed.clone();
                let i = x as usize % m.len().max(1);
                if let Some(b) = m.get_mut(i) {
                    *b = (x >> 8) as u8;
                }
                m.truncate(m.len() - (x as usize >> 24) % (m.len().max(1)));
                request_parts(&m);
            }
        }
    }
}
