//! A one-line progress display for long `produce`, `consume` and `copy`
//! runs: records so far, the rate, and the lag where the command knows it,
//! redrawn in place on stderr at most every 250 ms. Shown only when stderr
//! is a terminal: in a pipe or a file it writes nothing at all. It draws
//! with a carriage return and spaces only (no ANSI escapes), and clears its
//! line before the command's own report.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::thousands;

const REDRAW_EVERY: Duration = Duration::from_millis(250);

/// The progress line of one command.
#[derive(Debug)]
pub struct Progress {
    /// Whether anything is drawn (stderr is a terminal).
    enabled: bool,
    label: &'static str,
    started: Instant,
    last_draw: Option<Instant>,
    /// Width of the line last drawn, to blank it out.
    drawn: usize,
}

impl Progress {
    /// Progress for `label` ("produce", "consume", "copy"), shown only when
    /// stderr is a terminal.
    pub fn new(label: &'static str) -> Self {
        Self::with_terminal(label, std::io::stderr().is_terminal())
    }

    fn with_terminal(label: &'static str, enabled: bool) -> Self {
        Progress {
            enabled,
            label,
            started: Instant::now(),
            last_draw: None,
            drawn: 0,
        }
    }

    /// Reports `records` so far and, when `lag` knows it, the records still
    /// behind the end of the log. Cheap when nothing is due: one clock read
    /// (`lag` is called only when the line is drawn).
    pub fn update(&mut self, records: u64, lag: impl FnOnce() -> Option<u64>) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self.last_draw.is_some_and(|t| now.duration_since(t) < REDRAW_EVERY) {
            return;
        }
        self.last_draw = Some(now);
        let line = self.line(records, lag(), now.duration_since(self.started));
        self.draw(&line);
    }

    /// Blanks the line, so the command's own report starts on a clean one.
    pub fn finish(&mut self) {
        if self.enabled && self.drawn > 0 {
            self.draw("");
            let _ = std::io::stderr().write_all(b"\r");
            self.drawn = 0;
        }
    }

    fn line(&self, records: u64, lag: Option<u64>, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 { (records as f64 / secs) as u64 } else { 0 };
        let mut line = format!(
            "{}: {} records, {} records/s, {:.0} s",
            self.label,
            thousands(records),
            thousands(rate),
            secs
        );
        if let Some(lag) = lag {
            line.push_str(&format!(", lag {}", thousands(lag)));
        }
        line
    }

    fn draw(&mut self, line: &str) {
        let pad = self.drawn.saturating_sub(line.len());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}{:pad$}", "");
        let _ = err.flush();
        self.drawn = line.len();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Progress;

    #[test]
    fn the_line_shows_records_rate_and_lag() {
        let p = Progress::with_terminal("consume", false);
        assert_eq!(
            p.line(12_345, Some(678), Duration::from_secs(2)),
            "consume: 12,345 records, 6,172 records/s, 2 s, lag 678"
        );
        assert_eq!(p.line(0, None, Duration::ZERO), "consume: 0 records, 0 records/s, 0 s");
    }

    #[test]
    fn nothing_is_drawn_off_a_terminal() {
        let mut p = Progress::with_terminal("produce", false);
        p.update(10, || unreachable!("no lag is computed off a terminal"));
        p.finish();
        assert_eq!((p.drawn, p.last_draw), (0, None));
    }
}
