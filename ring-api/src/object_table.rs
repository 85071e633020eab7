//! `ObjectTable`: a thread-safe interner from `(bucket, key)` to [`ObjectId`].
//!
//! Submission entries are fixed-size, so names travel as ids. Interning happens once per
//! object, off the hot path, which is why a `RwLock` around two maps is good enough: lookups
//! from many threads share the read lock and never allocate.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::error::InternError;
use crate::handle::ObjectId;

/// Longest bucket name accepted (S3 allows 63; S3-compatible stores sometimes more).
pub const MAX_BUCKET_LEN: usize = 255;
/// Longest key accepted (the S3 limit, in UTF-8 bytes).
pub const MAX_KEY_LEN: usize = 1024;

/// A resolved object name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectName {
    /// Bucket name.
    pub bucket: Box<str>,
    /// Object key (not percent-encoded).
    pub key: Box<str>,
}

#[derive(Default)]
struct Inner {
    /// bucket -> key -> id; nested so a lookup by `(&str, &str)` needs no allocation.
    ids: HashMap<Box<str>, HashMap<Box<str>, ObjectId>>,
    /// INVARIANT: `names[id.0]` is the name interned as `id`; ids are dense from 0.
    names: Vec<Arc<ObjectName>>,
}

/// Interns `(bucket, key)` pairs into stable [`ObjectId`]s and resolves them back.
///
/// Ids are never reused or removed: an id held in an in-flight entry stays meaningful for the
/// life of the table. The table has a hard size limit so a runaway caller cannot grow it
/// without bound.
pub struct ObjectTable {
    inner: RwLock<Inner>,
    limit: u32,
}

impl std::fmt::Debug for ObjectTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectTable")
            .field("len", &self.len())
            .field("limit", &self.limit)
            .finish()
    }
}

impl Default for ObjectTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectTable {
    /// Default maximum number of names (16 Mi).
    pub const DEFAULT_LIMIT: u32 = 1 << 24;

    /// An empty table with [`ObjectTable::DEFAULT_LIMIT`].
    #[must_use]
    pub fn new() -> Self {
        Self::with_limit(Self::DEFAULT_LIMIT)
    }

    /// An empty table holding at most `limit` names.
    #[must_use]
    pub fn with_limit(limit: u32) -> Self {
        Self {
            inner: RwLock::new(Inner::default()),
            limit,
        }
    }

    /// Returns the id of `(bucket, key)`, interning it on first use.
    pub fn intern(&self, bucket: &str, key: &str) -> Result<ObjectId, InternError> {
        check(bucket, key)?;
        if let Some(id) = self.lookup(bucket, key) {
            return Ok(id);
        }
        // A poisoned lock only means another thread panicked mid-insert; both maps are updated
        // after every fallible step, so the data is still consistent.
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = inner.ids.get(bucket).and_then(|m| m.get(key)) {
            return Ok(*id); // raced with another interner
        }
        let next = u32::try_from(inner.names.len()).map_err(|_| InternError::Full(self.limit))?;
        if next >= self.limit {
            return Err(InternError::Full(self.limit));
        }
        let id = ObjectId(next);
        inner.names.push(Arc::new(ObjectName {
            bucket: bucket.into(),
            key: key.into(),
        }));
        inner
            .ids
            .entry(bucket.into())
            .or_default()
            .insert(key.into(), id);
        Ok(id)
    }

    /// The id of an already interned name, without interning.
    #[must_use]
    pub fn lookup(&self, bucket: &str, key: &str) -> Option<ObjectId> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.ids.get(bucket).and_then(|m| m.get(key)).copied()
    }

    /// The name behind `id`, or `None` for an id this table never issued (ids in ring entries
    /// are untrusted).
    #[must_use]
    pub fn resolve(&self, id: ObjectId) -> Option<Arc<ObjectName>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        usize::try_from(id.0)
            .ok()
            .and_then(|i| inner.names.get(i))
            .cloned()
    }

    /// Number of interned names.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .names
            .len()
    }

    /// `true` when nothing has been interned.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn check(bucket: &str, key: &str) -> Result<(), InternError> {
    if bucket.is_empty() || bucket.len() > MAX_BUCKET_LEN || bucket.contains('/') {
        return Err(InternError::Bucket);
    }
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(InternError::Key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_is_idempotent_and_resolves_back() {
        let t = ObjectTable::new();
        let a = t.intern("b", "k/1").unwrap();
        let b = t.intern("b", "k/2").unwrap();
        let c = t.intern("other", "k/1").unwrap();
        assert_eq!((a, b, c), (ObjectId(0), ObjectId(1), ObjectId(2)));
        assert_eq!(t.intern("b", "k/1").unwrap(), a);
        assert_eq!(t.lookup("other", "k/1"), Some(c));
        assert_eq!(t.lookup("other", "k/2"), None);
        let name = t.resolve(b).unwrap();
        assert_eq!((&*name.bucket, &*name.key), ("b", "k/2"));
        assert_eq!(t.resolve(ObjectId(3)), None);
        assert_eq!(t.resolve(ObjectId(u32::MAX)), None);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn rejects_bad_names_and_enforces_limit() {
        let t = ObjectTable::with_limit(1);
        assert_eq!(t.intern("", "k"), Err(InternError::Bucket));
        assert_eq!(t.intern("a/b", "k"), Err(InternError::Bucket));
        assert_eq!(t.intern("b", ""), Err(InternError::Key));
        assert_eq!(t.intern("b", &"x".repeat(1025)), Err(InternError::Key));
        assert!(t.intern("b", &"x".repeat(1024)).is_ok());
        assert_eq!(t.intern("b", "second"), Err(InternError::Full(1)));
        assert!(
            t.intern("b", &"x".repeat(1024)).is_ok(),
            "existing names still resolve"
        );
    }

    #[test]
    fn concurrent_interning_gives_one_id_per_name() {
        let t = Arc::new(ObjectTable::new());
        let ids: Vec<Vec<ObjectId>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let t = &t;
                    s.spawn(move || {
                        (0..200)
                            .map(|i| t.intern("b", &format!("k{i}")).unwrap())
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(t.len(), 200);
        for (i, id) in ids[0].iter().enumerate() {
            assert_eq!(&*t.resolve(*id).unwrap().key, format!("k{i}"));
        }
    }
}
