//! `HIPOBJ_LOG`: the engine's `tracing` events on stderr, for C programs (which have no Rust
//! subscriber of their own). Unset or empty: nothing is printed (the default). Otherwise a
//! level — `error`, `warn`, `info`, `debug`, `trace` — and every event at that level or above
//! goes to stderr, one line each. Installed once per process, at the first `hipObjInit` that
//! sees the variable; an unknown value is refused by `hipObjInit` (`hipObjInvalidValue`).

use crate::error::{CResult, Fail, OpError};

/// The variable's name.
pub const ENV: &str = "HIPOBJ_LOG";

/// The level a `HIPOBJ_LOG` value names (`None`: logging off).
pub fn level_of(value: &str) -> CResult<Option<tracing::Level>> {
    Ok(Some(match value.trim().to_ascii_lowercase().as_str() {
        "" | "off" => return Ok(None),
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "info" => tracing::Level::INFO,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        other => {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("{ENV}={other:?}: expected off, error, warn, info, debug or trace"),
            ));
        }
    }))
}

/// Installs the stderr subscriber if `HIPOBJ_LOG` asks for one (a subscriber already set in
/// this process, by the host program or an earlier `hipObjInit`, is kept).
pub fn init_from_env() -> CResult<()> {
    let Some(value) = std::env::var_os(ENV) else {
        return Ok(());
    };
    let Some(level) = level_of(&value.to_string_lossy())? else {
        return Ok(());
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_thread_names(true)
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_others_are_refused() {
        assert_eq!(level_of("").unwrap(), None);
        assert_eq!(level_of("off").unwrap(), None);
        assert_eq!(level_of("DEBUG").unwrap(), Some(tracing::Level::DEBUG));
        assert_eq!(level_of(" warn ").unwrap(), Some(tracing::Level::WARN));
        let e = level_of("loud").unwrap_err();
        assert_eq!(e.op, OpError::InvalidValue);
        assert!(e.message.contains("HIPOBJ_LOG"), "{}", e.message);
    }
}
