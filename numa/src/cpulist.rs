//! Linux cpulist parsing and formatting (`0-3,8-11`, `0-1023:2/256`).
//!
//! sysfs prints CPU sets as comma-separated ranges (`Documentation/admin-guide/cgroup-v1/cpusets`,
//! `bitmap_print_to_pagebuf`). The kernel's *input* syntax also accepts the grouped-stride form
//! `a-b:used/group` ("of every `group` CPUs starting at `a`, take the first `used`"); we accept it so a
//! hand-written fixture or a `--cpus` argument can use it. Everything else (`5-2`, `0-15:2` without
//! a group size, spaces inside a range) is an error. The set is bounded by [`MAX_CPU_ID`] so a
//! corrupt file cannot make us allocate without limit.

use std::fmt;

use serde::{Serialize, Serializer};

/// Highest CPU id we accept. Linux's `NR_CPUS` tops out at 8192 on x86-64; twice that leaves room.
pub const MAX_CPU_ID: u32 = 16_383;

/// Most comma-separated ranges one cpulist may hold (a fully fragmented 16384-CPU list has 8192).
pub const MAX_RANGES: usize = 8_192;

/// Why a cpulist string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuListError {
    /// A token was not a decimal CPU number.
    #[error("`{0}` is not a CPU number")]
    BadNumber(String),
    /// A range ends before it starts (`5-2`).
    #[error("range {start}-{end} ends before it starts")]
    Reversed {
        /// First CPU of the range.
        start: u32,
        /// Last CPU of the range.
        end: u32,
    },
    /// A CPU id above [`MAX_CPU_ID`].
    #[error("CPU {0} exceeds the limit of {MAX_CPU_ID}")]
    TooLarge(u32),
    /// More than [`MAX_RANGES`] ranges.
    #[error("more than {MAX_RANGES} ranges")]
    TooManyRanges,
    /// A stride suffix that is not `:used/group` with `0 < used <= group`.
    #[error("bad stride `{0}` (expected `:used/group` with 0 < used <= group)")]
    BadStride(String),
    /// An empty element, as in `0,,2` or a trailing comma.
    #[error("empty element in cpulist")]
    EmptyElement,
}

/// A set of logical CPU ids, kept sorted and deduplicated.
///
/// A plain sorted `Vec<u32>`: sets are small (at most a few hundred CPUs per node in practice),
/// built once at start-up, and iterated in order when choosing worker cores.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    // INVARIANT: strictly increasing, every element <= MAX_CPU_ID.
    cpus: Vec<u32>,
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a cpulist such as `0-55,112-167`. Surrounding whitespace (the trailing newline of a
    /// sysfs file) is ignored; an empty string is the empty set (a CPU-less NUMA node prints that).
    pub fn parse(s: &str) -> Result<Self, CpuListError> {
        let s = s.trim();
        let mut cpus = Vec::new();
        if s.is_empty() {
            return Ok(Self { cpus });
        }
        for (i, item) in s.split(',').enumerate() {
            if i >= MAX_RANGES {
                return Err(CpuListError::TooManyRanges);
            }
            parse_item(item, &mut cpus)?;
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(Self { cpus })
    }

    /// Builds a set from arbitrary ids; ids above [`MAX_CPU_ID`] are an error.
    pub fn from_cpus<I: IntoIterator<Item = u32>>(ids: I) -> Result<Self, CpuListError> {
        let mut cpus = Vec::new();
        for id in ids {
            if id > MAX_CPU_ID {
                return Err(CpuListError::TooLarge(id));
            }
            cpus.push(id);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(Self { cpus })
    }

    /// The CPU ids in increasing order.
    pub fn as_slice(&self) -> &[u32] {
        &self.cpus
    }

    /// Iterates the CPU ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.cpus.iter().copied()
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// True when the set holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.cpus.binary_search(&cpu).is_ok()
    }

    /// The CPUs present in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet {
            cpus: self.iter().filter(|c| other.contains(*c)).collect(),
        }
    }

    /// The CPUs present in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut cpus: Vec<u32> = self.iter().chain(other.iter()).collect();
        cpus.sort_unstable();
        cpus.dedup();
        CpuSet { cpus }
    }
}

fn parse_num(tok: &str) -> Result<u32, CpuListError> {
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::BadNumber(tok.to_string()));
    }
    let n: u32 = tok
        .parse()
        .map_err(|_| CpuListError::BadNumber(tok.to_string()))?;
    if n > MAX_CPU_ID {
        return Err(CpuListError::TooLarge(n));
    }
    Ok(n)
}

/// Parses one comma-separated element (`N`, `A-B` or `A-B:U/G`) and appends its CPUs.
fn parse_item(item: &str, out: &mut Vec<u32>) -> Result<(), CpuListError> {
    if item.is_empty() {
        return Err(CpuListError::EmptyElement);
    }
    let (range, stride) = match item.split_once(':') {
        Some((r, s)) => (r, Some(s)),
        None => (item, None),
    };
    let (start, end) = match range.split_once('-') {
        Some((a, b)) => (parse_num(a)?, parse_num(b)?),
        None => {
            let n = parse_num(range)?;
            (n, n)
        }
    };
    if end < start {
        return Err(CpuListError::Reversed { start, end });
    }
    let (used, group) = match stride {
        None => (1, 1),
        Some(s) => {
            let bad = || CpuListError::BadStride(s.to_string());
            let (u, g) = s.split_once('/').ok_or_else(bad)?;
            let (u, g) = (
                parse_num(u).map_err(|_| bad())?,
                parse_num(g).map_err(|_| bad())?,
            );
            if u == 0 || g == 0 || u > g {
                return Err(bad());
            }
            (u, g)
        }
    };
    // Both bounds are <= MAX_CPU_ID, so the loop is bounded by MAX_CPU_ID + 1 iterations.
    for cpu in start..=end {
        if (cpu - start) % group < used {
            out.push(cpu);
        }
    }
    Ok(())
}

impl fmt::Display for CpuSet {
    /// Formats in the kernel's canonical form: increasing, maximal ranges, `a-b` or `a`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.cpus.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while let Some(&next) = iter.peek() {
                if Some(next) == end.checked_add(1) {
                    end = next;
                    iter.next();
                } else {
                    break;
                }
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl Serialize for CpuSet {
    /// Serialized as the cpulist string (`"0-55,112-167"`), the form people read and paste.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        let s = CpuSet::parse("0-3,8-11\n").unwrap();
        assert_eq!(s.as_slice(), &[0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(CpuSet::parse("5").unwrap().as_slice(), &[5]);
        assert_eq!(CpuSet::parse("7,3,3-4").unwrap().as_slice(), &[3, 4, 7]);
        assert!(CpuSet::parse("").unwrap().is_empty());
        assert!(CpuSet::parse("\n").unwrap().is_empty());
    }

    #[test]
    fn formats_canonically() {
        let s = CpuSet::parse("0-55,112-167").unwrap();
        assert_eq!(s.len(), 112);
        assert_eq!(s.to_string(), "0-55,112-167");
        assert_eq!(CpuSet::parse("3,1,2,9").unwrap().to_string(), "1-3,9");
        assert_eq!(CpuSet::new().to_string(), "");
    }

    #[test]
    fn grouped_stride() {
        // Kernel example: "0-1023:2/256" == 0,1,256,257,512,513,768,769.
        let s = CpuSet::parse("0-1023:2/256").unwrap();
        assert_eq!(s.as_slice(), &[0, 1, 256, 257, 512, 513, 768, 769]);
        assert_eq!(
            CpuSet::parse("0-15:1/2").unwrap().to_string(),
            "0,2,4,6,8,10,12,14"
        );
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(
            CpuSet::parse("5-2"),
            Err(CpuListError::Reversed { start: 5, end: 2 })
        );
        assert_eq!(
            CpuSet::parse("abc"),
            Err(CpuListError::BadNumber("abc".into()))
        );
        assert_eq!(CpuSet::parse("0,,2"), Err(CpuListError::EmptyElement));
        assert_eq!(CpuSet::parse("0,"), Err(CpuListError::EmptyElement));
        assert_eq!(CpuSet::parse("-1"), Err(CpuListError::BadNumber("".into())));
        assert_eq!(CpuSet::parse("0-16384"), Err(CpuListError::TooLarge(16384)));
        assert_eq!(
            CpuSet::parse("99999999999999"),
            Err(CpuListError::BadNumber("99999999999999".into()))
        );
        assert_eq!(
            CpuSet::parse("0-15:2"),
            Err(CpuListError::BadStride("2".into()))
        );
        assert_eq!(
            CpuSet::parse("0-15:3/2"),
            Err(CpuListError::BadStride("3/2".into()))
        );
        assert_eq!(
            CpuSet::parse("0-15:0/2"),
            Err(CpuListError::BadStride("0/2".into()))
        );
        assert_eq!(
            CpuSet::parse("+1"),
            Err(CpuListError::BadNumber("+1".into()))
        );
        let many = vec!["1"; MAX_RANGES + 1].join(",");
        assert_eq!(CpuSet::parse(&many), Err(CpuListError::TooManyRanges));
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert!(a.contains(7) && !a.contains(8));
        assert_eq!(
            CpuSet::from_cpus([MAX_CPU_ID + 1]),
            Err(CpuListError::TooLarge(MAX_CPU_ID + 1))
        );
    }
}
