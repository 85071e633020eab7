//! `hipobj topo` (being written).
