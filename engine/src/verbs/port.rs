//! Port facts that decide QP attributes: the path MTU comes from the port's *active* MTU
//! (rxe runs at 1024, many RoCE NICs at 4096 only with jumbo frames), never a constant.

use super::sys;

/// `enum ibv_mtu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Mtu {
    /// 256 bytes.
    B256 = 1,
    /// 512 bytes.
    B512 = 2,
    /// 1024 bytes.
    B1024 = 3,
    /// 2048 bytes.
    B2048 = 4,
    /// 4096 bytes.
    B4096 = 5,
}

impl Mtu {
    /// From the C enum value (`active_mtu`, `path_mtu`).
    #[must_use]
    pub const fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::B256,
            2 => Self::B512,
            3 => Self::B1024,
            4 => Self::B2048,
            5 => Self::B4096,
            _ => return None,
        })
    }

    /// The C enum value.
    #[must_use]
    pub const fn to_raw(self) -> u32 {
        self as u32
    }

    /// Bytes.
    #[must_use]
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// The RC path MTU for a port whose `active_mtu` is `active` (raw enum value): the active MTU
/// itself, capped by `peer` when the peer's is known and lower. An out-of-range value (a
/// provider bug) yields 1024, the value Ceph and ROCm fall back to.
#[must_use]
pub fn path_mtu(active: u32, peer: Option<Mtu>) -> Mtu {
    let mine = Mtu::from_raw(active).unwrap_or(Mtu::B1024);
    match peer {
        Some(p) if p < mine => p,
        _ => mine,
    }
}

/// What the engine needs from `ibv_query_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub port: u8,
    /// `IBV_PORT_ACTIVE`?
    pub active: bool,
    /// Raw `state` (`enum ibv_port_state`).
    pub state: u32,
    /// Active MTU (raw enum value; see [`path_mtu`]).
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Ethernet link layer (RoCE: GRH mandatory, LID unused).
    pub ethernet: bool,
}

impl PortInfo {
    /// From the C struct.
    #[must_use]
    pub fn from_raw(port: u8, a: &sys::ibv_port_attr) -> Self {
        Self {
            port,
            active: a.state == sys::IBV_PORT_ACTIVE,
            state: a.state,
            active_mtu: a.active_mtu,
            gid_tbl_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
            lid: a.lid,
            ethernet: a.link_layer == sys::IBV_LINK_LAYER_ETHERNET,
        }
    }

    /// The path MTU to use towards a peer (see [`path_mtu`]).
    #[must_use]
    pub fn path_mtu(&self, peer: Option<Mtu>) -> Mtu {
        path_mtu(self.active_mtu, peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_mtu_follows_the_active_mtu() {
        assert_eq!(path_mtu(3, None), Mtu::B1024); // rxe
        assert_eq!(path_mtu(3, None).bytes(), 1024);
        assert_eq!(path_mtu(5, None).bytes(), 4096);
        assert_eq!(path_mtu(5, Some(Mtu::B2048)), Mtu::B2048);
        assert_eq!(path_mtu(2, Some(Mtu::B4096)), Mtu::B512);
        assert_eq!(path_mtu(0, None), Mtu::B1024);
        assert_eq!(path_mtu(9, None), Mtu::B1024);
        for v in 1..=5 {
            assert_eq!(Mtu::from_raw(v).map(Mtu::to_raw), Some(v));
        }
    }

    #[test]
    fn port_info_from_raw() {
        let a = sys::ibv_port_attr {
            state: sys::IBV_PORT_ACTIVE,
            active_mtu: 3,
            gid_tbl_len: 64,
            link_layer: sys::IBV_LINK_LAYER_ETHERNET,
            ..Default::default()
        };
        let p = PortInfo::from_raw(1, &a);
        assert!(p.active && p.ethernet);
        assert_eq!((p.gid_tbl_len, p.path_mtu(None).bytes()), (64, 1024));
    }
}
