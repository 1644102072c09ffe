//! Where the CLI's logs go and how they look: `tracing` events on stderr,
//! as text (ANSI colours only when stderr is a terminal and `NO_COLOR` is
//! unset or empty, per <https://no-color.org>) or as JSON lines
//! (`--log-format json`), filtered by `RUST_LOG` (default `warn`). Under
//! JSON the final error is a JSON line too; a command's own report lines
//! (`produced N records …`, `copy: checkpoint …`) stay text.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per event.
    Json,
}

/// Whether text logs carry ANSI colours: only on a terminal, and never
/// when `NO_COLOR` is set to a non-empty value.
pub fn colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber for `format`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let ansi = colours(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
            builder.with_ansi(ansi).init();
        }
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Reports the command's final error on stderr in `format` (under JSON,
/// as an ERROR event of the same subscriber, so it has the logs' shape).
pub fn report_error(format: LogFormat, error: &anyhow::Error) {
    match format {
        LogFormat::Text => eprintln!("error: {error:#}"),
        LogFormat::Json => tracing::error!(target: "clink_kafka::cli", "{error:#}"),
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(super::colours(true, None));
        assert!(super::colours(true, Some(OsStr::new(""))));
        assert!(!super::colours(true, Some(OsStr::new("1"))));
        assert!(!super::colours(false, None));
        assert!(!super::colours(false, Some(OsStr::new("1"))));
    }
}
