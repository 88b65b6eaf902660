//! Logging: a `tracing` subscriber writing to stderr, plain lines for a
//! person or one JSON object per line (with the fields of the spans the
//! event happened in: a connection's peer, a review's uid and pod, an
//! extender call's verb and pod, and their outcome). Filtered by
//! `--log-level`, else `RUST_LOG`, else `info`.

use tracing_subscriber::EnvFilter;

use crate::cli::{LogArgs, LogFormat};

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("--log-level {filter:?}: {source}")]
    Filter {
        filter: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("logging is set up already: {0}")]
    Init(String),
}

/// The filter: `--log-level` (or `GPUGATE_LOG_LEVEL`), else `RUST_LOG`,
/// else `info`.
pub fn filter(args: &LogArgs) -> Result<EnvFilter, LogError> {
    match &args.log_level {
        Some(level) => EnvFilter::try_new(level).map_err(|source| LogError::Filter {
            filter: level.clone(),
            source,
        }),
        None => Ok(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))),
    }
}

/// Installs the subscriber for the whole process.
pub fn init(args: &LogArgs) -> Result<(), LogError> {
    let filter = filter(args)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Plain => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    result.map_err(|e| LogError::Init(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(level: Option<&str>) -> LogArgs {
        LogArgs {
            log_level: level.map(str::to_string),
            log_format: LogFormat::Plain,
        }
    }

    #[test]
    fn a_bad_filter_is_an_error_naming_it() {
        let e = filter(&args(Some("gpugate=loud"))).unwrap_err();
        assert!(e.to_string().contains("gpugate=loud"), "{e}");
        assert!(filter(&args(Some("info,gpugate=debug"))).is_ok());
        assert!(filter(&args(Some("warn"))).is_ok());
    }
}
