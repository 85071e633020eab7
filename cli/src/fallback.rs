//! A forced `--fabric soft|verbs` the transfer could not use says so.
//!
//! `--fabric soft` and `--fabric verbs` run the engine with per-request HTTP fallback: an
//! endpoint that declines the RDMA token (a gateway started without `--fabric soft`, any plain
//! S3 server) still gets the bytes, in HTTP bodies. That is right for availability and wrong
//! to keep quiet: the user asked for RDMA. [`warning`] is the one line `get` and `put` print on
//! stderr (with or without `--json`) when a forced fabric carried fewer than all the bytes, and
//! names the fallback that happened.

use crate::engine_io::{FabricChoice, PathBytes};

/// Which client carried a transfer.
#[derive(Debug, Clone, Copy)]
pub enum Carried<'a> {
    /// The blocking HTTP client, and why the engine did not run.
    Blocking(&'a str),
    /// The engine, with the bytes it moved per path.
    Engine(&'a PathBytes),
}

fn name(choice: FabricChoice) -> Option<&'static str> {
    match choice {
        FabricChoice::Soft => Some("soft"),
        FabricChoice::Verbs => Some("verbs"),
        FabricChoice::Auto | FabricChoice::Http => None,
    }
}

/// The warning for a transfer forced onto `choice` that went (partly) over HTTP; `None` when
/// no fabric was forced, when `--dialect http` asked for HTTP, or when RDMA carried every byte.
#[must_use]
pub fn warning(
    choice: FabricChoice,
    dialect: engine::Dialect,
    carried: Carried<'_>,
) -> Option<String> {
    let fabric = name(choice)?;
    if dialect == engine::Dialect::Http {
        return None;
    }
    let paths = match carried {
        Carried::Blocking(why) => {
            return Some(format!(
                "--fabric {fabric} was not used: {why}; the blocking HTTP client carried the bytes"
            ));
        }
        Carried::Engine(paths) => paths,
    };
    let (mut rdma, mut http) = (0u64, 0u64);
    for (path, bytes) in &paths.0 {
        if path.starts_with("rdma-") {
            rdma += bytes;
        } else {
            http += bytes;
        }
    }
    if http == 0 {
        return None;
    }
    Some(if rdma == 0 {
        format!(
            "--fabric {fabric} was not used: the endpoint declined RDMA for every request (no \
             {fabric} fabric there: a gateway needs `hipobj serve --fabric {fabric}`); the engine \
             fell back to HTTP bodies for all {http} bytes"
        )
    } else {
        format!(
            "--fabric {fabric}: the endpoint declined RDMA for some requests; the engine fell back \
             to HTTP bodies for {http} of {} bytes",
            http + rdma
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Dialect;

    fn paths(p: &[(&'static str, u64)]) -> PathBytes {
        PathBytes(p.to_vec(), Vec::new())
    }

    #[test]
    fn a_forced_fabric_that_carried_nothing_names_the_http_fallback() {
        let all_http = paths(&[("http", 10)]);
        let w = warning(
            FabricChoice::Soft,
            Dialect::Auto,
            Carried::Engine(&all_http),
        )
        .unwrap();
        assert!(w.starts_with("--fabric soft was not used"), "{w}");
        assert!(w.contains("hipobj serve --fabric soft"), "{w}");
        assert!(w.contains("HTTP bodies for all 10 bytes"), "{w}");
        let mixed = paths(&[("rdma-verbs", 6), ("http", 4)]);
        let w = warning(FabricChoice::Verbs, Dialect::Auto, Carried::Engine(&mixed)).unwrap();
        assert!(w.contains("4 of 10 bytes"), "{w}");
        let w = warning(
            FabricChoice::Soft,
            Dialect::Auto,
            Carried::Blocking("https"),
        )
        .unwrap();
        assert!(w.contains("https; the blocking HTTP client"), "{w}");
    }

    #[test]
    fn no_warning_when_rdma_carried_everything_or_none_was_forced() {
        let rdma = paths(&[("rdma-soft", 10)]);
        assert_eq!(
            warning(FabricChoice::Soft, Dialect::Auto, Carried::Engine(&rdma)),
            None
        );
        let http = paths(&[("http", 10)]);
        assert_eq!(
            warning(FabricChoice::Auto, Dialect::Auto, Carried::Engine(&http)),
            None
        );
        assert_eq!(
            warning(FabricChoice::Http, Dialect::Auto, Carried::Blocking("x")),
            None
        );
        // `--dialect http` asked for HTTP bodies.
        assert_eq!(
            warning(FabricChoice::Soft, Dialect::Http, Carried::Engine(&http)),
            None
        );
    }
}
