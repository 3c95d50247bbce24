//! Values several subcommands take the same way: durations on the command line (`90s`, `5m`, `24h`)
//! and the agents' log level. One definition, so `bursar serve`, `bursar slurm` and `bursar kube`
//! read `--interval 2s` and `--log-level debug` alike.

use std::time::Duration as StdDuration;

use bursar_model::Duration;

/// A duration argument (`90s`, `5m`, `24h`), with the parser's own message when it is not one.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    Duration::parse(s).map_err(|e| e.to_string())
}

/// The standard library's form of a duration (0 for a negative one).
pub fn std_duration(d: Duration) -> StdDuration {
    StdDuration::from_millis(u64::try_from(d.millis()).unwrap_or(0))
}

/// Starts human-readable logging at `level`, as the long-lived agents (`bursar slurm`, `bursar
/// kube`) log.
pub fn init_agent_logging(level: crate::serve::tracing_level::Level) {
    bursar_serve::init_logging(bursar_serve::LogFormat::Human, level.tracing());
}
