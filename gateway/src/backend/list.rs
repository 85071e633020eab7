//! ListObjectsV2 pagination over a sorted key set: prefix, delimiter roll-up, start-after,
//! continuation tokens and max-keys, with S3's semantics (common prefixes count towards
//! max-keys; a token resumes strictly after the last key or prefix returned).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::{ListPage, ListQuery};
use crate::error::ApiError;

/// An opaque continuation token for "resume after `last`".
pub fn encode_token(last: &str) -> String {
    URL_SAFE_NO_PAD.encode(last.as_bytes())
}

/// Decodes a token from [`encode_token`].
pub fn decode_token(token: &str) -> Result<String, ApiError> {
    URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| ApiError::invalid_argument("The continuation token provided is incorrect"))
}

/// One page from `keys` (sorted ascending, unique). `entry(key)` builds the listed entry.
pub fn paginate<'k>(
    keys: impl Iterator<Item = &'k str>,
    query: &ListQuery,
    mut entry: impl FnMut(&str) -> Option<super::ListEntry>,
) -> Result<ListPage, ApiError> {
    let token = query
        .continuation_token
        .as_deref()
        .map(decode_token)
        .transpose()?;
    // Resume strictly after the later of start-after and the token.
    let after: Option<String> = match (token, query.start_after.clone()) {
        (Some(t), Some(s)) => Some(t.max(s)),
        (t, s) => t.or(s),
    };
    let delim = query.delimiter.as_deref().filter(|d| !d.is_empty());
    let mut page = ListPage::default();
    if query.max_keys == 0 {
        // S3 answers an empty, untruncated page for MaxKeys=0.
        return Ok(page);
    }
    let mut count = 0u32;
    let mut last: Option<String> = None;
    for key in keys {
        if !key.starts_with(query.prefix.as_str()) {
            continue;
        }
        if let Some(a) = after.as_deref()
            && key <= a
        {
            continue;
        }
        let prefix_of_key = delim.and_then(|d| {
            let rest = key.get(query.prefix.len()..)?;
            rest.find(d).map(|i| {
                key.get(..query.prefix.len() + i + d.len())
                    .unwrap_or(key)
                    .to_owned()
            })
        });
        if let Some(cp) = &prefix_of_key {
            // Already returned (this page or, via the token, an earlier one).
            if page.common_prefixes.last() == Some(cp) || after.as_deref() == Some(cp.as_str()) {
                continue;
            }
        }
        if count >= query.max_keys {
            page.is_truncated = true;
            break;
        }
        match prefix_of_key {
            Some(cp) => {
                last = Some(cp.clone());
                page.common_prefixes.push(cp);
            }
            None => {
                let Some(e) = entry(key) else { continue };
                last = Some(key.to_owned());
                page.contents.push(e);
            }
        }
        count += 1;
    }
    if page.is_truncated {
        page.next_continuation_token = last.as_deref().map(encode_token);
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ListEntry;

    fn list(keys: &[&str], q: &ListQuery) -> ListPage {
        paginate(keys.iter().copied(), q, |k| {
            Some(ListEntry {
                key: k.into(),
                ..Default::default()
            })
        })
        .unwrap()
    }

    fn names(p: &ListPage) -> Vec<String> {
        p.contents
            .iter()
            .map(|e| e.key.clone())
            .chain(p.common_prefixes.iter().cloned())
            .collect()
    }

    #[test]
    fn delimiter_and_pages() {
        let keys = ["a/1", "a/2", "b", "c/x/1", "c/y", "d"];
        let q = ListQuery {
            delimiter: Some("/".into()),
            max_keys: 2,
            ..Default::default()
        };
        let p1 = list(&keys, &q);
        assert_eq!(names(&p1), ["b", "a/"]);
        assert!(p1.is_truncated);
        let p2 = list(
            &keys,
            &ListQuery {
                continuation_token: p1.next_continuation_token.clone(),
                ..q.clone()
            },
        );
        assert_eq!(names(&p2), ["d", "c/"]);
        assert!(!p2.is_truncated);
        let c = list(
            &keys,
            &ListQuery {
                prefix: "c/".into(),
                delimiter: Some("/".into()),
                max_keys: 1000,
                ..Default::default()
            },
        );
        assert_eq!(names(&c), ["c/y", "c/x/"]);
        let s = list(
            &keys,
            &ListQuery {
                start_after: Some("b".into()),
                max_keys: 1000,
                ..Default::default()
            },
        );
        assert_eq!(names(&s), ["c/x/1", "c/y", "d"]);
        assert!(decode_token("!!").is_err());
    }
}
