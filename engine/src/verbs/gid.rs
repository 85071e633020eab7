//! Source-GID choice from sysfs: `/sys/class/infiniband/<dev>/ports/<port>/gids/<i>` (the GID,
//! `xxxx:xxxx:…` text) and `…/gid_attrs/types/<i>` (`RoCE v2` or `IB/RoCE v1`).
//!
//! Ranking (later ROCm `PickBestGid`; docs/verbs.md, GID choice), best first: RoCEv2 IPv4-mapped,
//! RoCEv2 global, RoCEv2 link-local, RoCEv1 global, RoCEv1 link-local. All-zero entries and
//! entries whose type is missing or unknown are skipped; ties keep the lowest index. Pure parsers plus one
//! reader over a root path (default `/sys`), so the choice is tested on fixture trees.

use std::fmt;
use std::path::{Path, PathBuf};

/// GID table entries read at most (real tables have ≤ 256; a hostile tree cannot make us
/// read without bound).
pub const MAX_GID_ENTRIES: u32 = 1024;

/// The RoCE version of a GID entry (`gid_attrs/types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GidType {
    /// `RoCE v2` (UDP/IP encapsulated).
    RoceV2,
    /// `IB/RoCE v1` (InfiniBand, or RoCE over raw Ethernet).
    IbRoceV1,
}

impl GidType {
    /// Parses the sysfs text (trailing newline allowed); `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "RoCE v2" => Some(Self::RoceV2),
            "IB/RoCE v1" => Some(Self::IbRoceV1),
            _ => None,
        }
    }
}

/// What kind of address a GID is (the second ranking key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidFamily {
    /// `::ffff:a.b.c.d`.
    Ipv4Mapped,
    /// `fe80::/10`.
    LinkLocal,
    /// Anything else non-zero.
    Global,
}

/// Parses the sysfs GID text: eight groups of four hex digits separated by `:`.
#[must_use]
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut groups = text.trim().split(':');
    for pair in out.chunks_exact_mut(2) {
        let g = groups.next()?;
        if g.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        pair.copy_from_slice(&v.to_be_bytes());
    }
    if groups.next().is_some() {
        return None;
    }
    Some(out)
}

/// The family of a non-zero GID.
#[must_use]
pub fn family(gid: &[u8; 16]) -> GidFamily {
    if gid[..10].iter().all(|b| *b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        GidFamily::Ipv4Mapped
    } else if gid[0] == 0xfe && gid[1] & 0xc0 == 0x80 {
        GidFamily::LinkLocal
    } else {
        GidFamily::Global
    }
}

/// One usable GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the port's table (`sgid_index`).
    pub index: u8,
    /// Raw GID bytes.
    pub gid: [u8; 16],
    /// RoCE version.
    pub kind: GidType,
}

impl GidEntry {
    /// Rank: lower is better (see the module docs).
    #[must_use]
    pub fn rank(&self) -> u8 {
        match (self.kind, family(&self.gid)) {
            (GidType::RoceV2, GidFamily::Ipv4Mapped) => 0,
            (GidType::RoceV2, GidFamily::Global) => 1,
            (GidType::RoceV2, GidFamily::LinkLocal) => 2,
            (GidType::IbRoceV1, GidFamily::Global | GidFamily::Ipv4Mapped) => 3,
            (GidType::IbRoceV1, GidFamily::LinkLocal) => 4,
        }
    }
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "index {} {:?} ", self.index, self.kind)?;
        for (i, pair) in self.gid.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// The best entry of `entries` (lowest rank, then lowest index); zero GIDs never win.
#[must_use]
pub fn choose(entries: &[GidEntry]) -> Option<GidEntry> {
    entries
        .iter()
        .filter(|e| e.gid != [0; 16])
        .min_by_key(|e| (e.rank(), e.index))
        .copied()
}

/// Why no source GID suits a peer ([`choose_for_peer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoPeerFamily {
    /// The peer GID's family.
    pub family: GidFamily,
}

impl fmt::Display for GidFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ipv4Mapped => "IPv4-mapped",
            Self::LinkLocal => "link-local",
            Self::Global => "global",
        })
    }
}

/// Bits `a` and `b` share from the top.
fn common_prefix(a: &[u8; 16], b: &[u8; 16]) -> u32 {
    let mut n = 0;
    for (x, y) in a.iter().zip(b) {
        let d = x ^ y;
        if d != 0 {
            return n + d.leading_zeros();
        }
        n += 8;
    }
    n
}

/// The source GID to pair with a peer whose token names `peer` (docs/verbs.md, GID choice: servers
/// pick one of the **same family** as the peer's — link-local with link-local, IPv4-mapped with
/// IPv4-mapped, global with global — because RoCE cannot route between a link-local and an
/// IPv4 GID and `ibv_modify_qp(RTR)` fails with `EINVAL`). Among entries of that family: the
/// longest common prefix with the peer first (same subnet), then [`GidEntry::rank`] (RoCEv2
/// before v1), then the lowest index. A zero `peer` (the loopback marker) gets [`choose`].
/// Pure, so it is tested on GID tables.
pub fn choose_for_peer(entries: &[GidEntry], peer: &[u8; 16]) -> Result<GidEntry, NoPeerFamily> {
    if *peer == [0; 16] {
        return choose(entries).ok_or(NoPeerFamily {
            family: GidFamily::Global,
        });
    }
    let want = family(peer);
    entries
        .iter()
        .filter(|e| e.gid != [0; 16] && family(&e.gid) == want)
        .min_by_key(|e| {
            (
                std::cmp::Reverse(common_prefix(&e.gid, peer)),
                e.rank(),
                e.index,
            )
        })
        .copied()
        .ok_or(NoPeerFamily { family: want })
}

/// The sysfs directory of one port.
#[must_use]
pub fn port_dir(sys_root: &Path, device: &str, port: u8) -> PathBuf {
    sys_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
}

/// Reads the usable entries of a port's GID table. Missing files, unreadable entries (the
/// kernel answers `EINVAL` for an empty slot's type) and unknown types are skipped; only a
/// missing `gids` directory is an error.
pub fn read_table(sys_root: &Path, device: &str, port: u8) -> std::io::Result<Vec<GidEntry>> {
    let dir = port_dir(sys_root, device, port);
    let mut indices: Vec<u32> = std::fs::read_dir(dir.join("gids"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|i| *i < MAX_GID_ENTRIES)
        .collect();
    indices.sort_unstable();
    let mut out = Vec::new();
    for i in indices {
        let Ok(index) = u8::try_from(i) else { continue };
        let read = |sub: &str| std::fs::read_to_string(dir.join(sub).join(i.to_string())).ok();
        let Some(gid) = read("gids").as_deref().and_then(parse_gid) else {
            continue;
        };
        let Some(kind) = read("gid_attrs/types").as_deref().and_then(GidType::parse) else {
            continue;
        };
        if gid != [0; 16] {
            out.push(GidEntry { index, gid, kind });
        }
    }
    Ok(out)
}

/// Reads the table and chooses (see [`choose`]).
pub fn choose_from_sysfs(
    sys_root: &Path,
    device: &str,
    port: u8,
) -> std::io::Result<Option<GidEntry>> {
    Ok(choose(&read_table(sys_root, device, port)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/verbs")
            .join(name)
            .join("sys")
    }

    #[test]
    fn parses_sysfs_gid_text() {
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:c000:0201\n"),
            Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1])
        );
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:3401").map(|g| g[0]),
            Some(0xfe)
        );
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:c000:0201:0000"),
            None
        );
        assert_eq!(parse_gid("zzzz:0000:0000:0000:0000:ffff:c000:0201"), None);
    }

    #[test]
    fn rxe_fixture_picks_the_roce_v2_ipv4_gid_at_index_1() {
        // Captured shape of rxe0 on virtio-net (192.0.2.1): 0 = link-local v2, 1 = IPv4 v2.
        let table = read_table(&fixture("rxe"), "rxe0", 1).unwrap();
        assert_eq!(table.len(), 2, "{table:?}");
        let best = choose(&table).unwrap();
        assert_eq!(best.index, 1);
        assert_eq!(best.kind, GidType::RoceV2);
        assert_eq!(&best.gid[10..], &[0xff, 0xff, 192, 0, 2, 1]);
    }

    #[test]
    fn mixed_fixture_ranks_v2_ipv4_then_global_then_link_local_then_v1() {
        // mlx5-style table: v1/v2 pairs for link-local, a global IPv6 and an IPv4; a zero slot
        // and a slot with an unknown type in between.
        let root = fixture("mixed");
        let table = read_table(&root, "mlx5_0", 1).unwrap();
        let idx: Vec<u8> = table.iter().map(|e| e.index).collect();
        assert_eq!(
            idx,
            vec![0, 1, 2, 3, 6, 7],
            "zero (4) and unknown-type (5) skipped"
        );
        assert_eq!(choose(&table).unwrap().index, 7, "RoCEv2 IPv4");
        let without = |drop: &[u8]| {
            let t: Vec<GidEntry> = table
                .iter()
                .filter(|e| !drop.contains(&e.index))
                .copied()
                .collect();
            choose(&t).map(|e| e.index)
        };
        assert_eq!(without(&[7]), Some(3), "RoCEv2 global next");
        assert_eq!(without(&[7, 3]), Some(1), "RoCEv2 link-local next");
        assert_eq!(
            without(&[7, 3, 1]),
            Some(2),
            "RoCEv1 global before v1 link-local"
        );
        assert_eq!(without(&[7, 3, 1, 2, 6]), Some(0), "RoCEv1 link-local last");
        assert_eq!(without(&[0, 1, 2, 3, 6, 7]), None);
    }

    #[test]
    fn ties_keep_the_lowest_index_and_zero_never_wins() {
        let v4 = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0005").unwrap();
        let e = |index, gid, kind| GidEntry { index, gid, kind };
        let t = [
            e(4, v4, GidType::RoceV2),
            e(2, v4, GidType::RoceV2),
            e(0, [0; 16], GidType::RoceV2),
        ];
        assert_eq!(choose(&t).unwrap().index, 2);
        assert_eq!(choose(&t[2..]), None);
    }

    #[test]
    fn peer_gets_a_source_gid_of_its_own_family() {
        // rxe0 on virtio-net: 0 = link-local v2, 1 = IPv4-mapped v2 (192.0.2.1).
        let table = read_table(&fixture("rxe"), "rxe0", 1).unwrap();
        let link_local = parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:9999").unwrap();
        let v4 = parse_gid("0000:0000:0000:0000:0000:ffff:c000:0202").unwrap();
        let global = parse_gid("2001:0db8:0000:0000:0000:0000:0000:0001").unwrap();
        assert_eq!(choose_for_peer(&table, &link_local).unwrap().index, 0);
        assert_eq!(choose_for_peer(&table, &v4).unwrap().index, 1);
        // No global GID on rxe0: the caller names the cause.
        let e = choose_for_peer(&table, &global).unwrap_err();
        assert_eq!(e.family, GidFamily::Global);
        assert_eq!(e.family.to_string(), "global");
        // The loopback marker (zero GID) gets the port's best.
        assert_eq!(choose_for_peer(&table, &[0; 16]).unwrap().index, 1);
        // Without a link-local entry a link-local peer has no partner.
        let only_v4: Vec<GidEntry> = table.iter().filter(|e| e.index == 1).copied().collect();
        assert_eq!(
            choose_for_peer(&only_v4, &link_local).unwrap_err().family,
            GidFamily::LinkLocal
        );
    }

    #[test]
    fn same_subnet_first_then_rank_then_index() {
        // mlx5-style table: link-local v1 (0) / v2 (1), global v1 (2) / v2 (3), IPv4 v1 (6) / v2 (7).
        let table = read_table(&fixture("mixed"), "mlx5_0", 1).unwrap();
        let ll = table.iter().find(|e| e.index == 1).unwrap().gid;
        let mut peer_ll = ll;
        peer_ll[15] ^= 0x55;
        assert_eq!(
            choose_for_peer(&table, &peer_ll).unwrap().index,
            1,
            "v2 before v1"
        );
        let v4 = table.iter().find(|e| e.index == 7).unwrap().gid;
        let mut peer_v4 = v4;
        peer_v4[15] ^= 0x01;
        assert_eq!(choose_for_peer(&table, &peer_v4).unwrap().index, 7);
        // Two IPv4 GIDs on different subnets: the peer's subnet wins over the lower index.
        let e = |index, gid, kind| GidEntry { index, gid, kind };
        let a = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0005").unwrap();
        let b = parse_gid("0000:0000:0000:0000:0000:ffff:c0a8:0105").unwrap();
        let t = [e(2, a, GidType::RoceV2), e(3, b, GidType::RoceV2)];
        let peer = parse_gid("0000:0000:0000:0000:0000:ffff:c0a8:0109").unwrap();
        assert_eq!(choose_for_peer(&t, &peer).unwrap().index, 3);
        let peer = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0009").unwrap();
        assert_eq!(choose_for_peer(&t, &peer).unwrap().index, 2);
    }

    #[test]
    fn missing_port_is_an_error_not_a_panic() {
        assert!(read_table(&fixture("rxe"), "rxe0", 2).is_err());
        assert!(read_table(&fixture("nope"), "x", 1).is_err());
    }
}
