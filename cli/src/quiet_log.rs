//! The stderr format of `hipobj` without `-v`: warnings as `hipobj: warning: ...` (the CLI's
//! one prefix for diagnostics, like `hipobj: error: ...`), other events (the access log of
//! `serve --access-log`) as a UTC timestamp and their bare message.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// See the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietFormat;

impl<S, N> FormatEvent<S, N> for QuietFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        match *event.metadata().level() {
            Level::ERROR => write!(writer, "hipobj: error: ")?,
            Level::WARN => write!(writer, "hipobj: warning: ")?,
            _ => {
                SystemTime.format_time(&mut writer)?;
                write!(writer, " ")?;
            }
        }
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
