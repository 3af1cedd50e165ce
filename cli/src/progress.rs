//! The progress display: a bar on a terminal, a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::LearnerStatus;
use indicatif::{ProgressBar, ProgressStyle};

/// Seconds without a new env step after which the rate shown is 0.
const STALLED: f64 = 30.0;

/// Shows env steps, steps per second and the recent return.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    last_line: Instant,
    window: (Instant, u64),
    sps: f64,
}

impl Progress {
    pub(crate) fn new(total_env_steps: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total_env_steps);
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} steps  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar
        });
        Progress {
            bar,
            last_line: Instant::now(),
            window: (Instant::now(), 0),
            sps: 0.0,
        }
    }

    pub(crate) fn update(&mut self, status: &LearnerStatus) {
        self.count(status.env_steps_trained, Instant::now());
        let recent = if status.recent_return.is_finite() {
            format!("{:>6.1}", status.recent_return)
        } else {
            "     -".to_string()
        };
        let message = format!(
            "{:>7.0} steps/s  return {recent}  version {}  actors {}",
            self.sps,
            status.policy_version,
            status
                .actors
                .iter()
                .filter(|a| a.seconds_since_report < 10.0)
                .count()
        );
        match &self.bar {
            Some(bar) => {
                bar.set_position(status.env_steps_trained);
                bar.set_message(message);
            }
            None if self.last_line.elapsed() >= Duration::from_secs(5) => {
                self.last_line = Instant::now();
                eprintln!("[fleetrl] {} steps  {message}", status.env_steps_trained);
            }
            None => {}
        }
    }

    /// Folds `steps` seen at `now` into the rate. Some runs count steps in chunks (a PEARL
    /// round, a MAML meta-batch): the window stays open until the next chunk lands, so the
    /// rate spans it instead of reading 0 between chunks; a run that stalls reads 0 after
    /// `STALLED`.
    fn count(&mut self, steps: u64, now: Instant) {
        let (since, steps_then) = self.window;
        let dt = now.saturating_duration_since(since).as_secs_f64();
        if dt >= 1.0 && (steps > steps_then || dt >= STALLED) {
            self.sps = steps.saturating_sub(steps_then) as f64 / dt;
            self.window = (now, steps);
        }
    }

    pub(crate) fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("[fleetrl] {line}"),
        }
    }

    pub(crate) fn finish(&self, reason: &str) {
        match &self.bar {
            Some(bar) => bar.finish_with_message(reason.to_string()),
            None => eprintln!("[fleetrl] {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps landing 1,000 at a time every 1.5 s read 667 steps/s at every tick between
    /// chunks, not 0; a stall reads 0 once it has lasted `STALLED`.
    #[test]
    fn chunked_steps_keep_their_rate_between_chunks() {
        let start = Instant::now();
        let mut progress = Progress::new(100_000);
        progress.window = (start, 0);
        let at = |s: f64| start + Duration::from_secs_f64(s);
        let mut steps = 0;
        for chunk in 1..=4 {
            let landed = 1.5 * f64::from(chunk);
            for tick in [0.0, 0.5, 1.0] {
                progress.count(steps, at(landed - 1.5 + tick + 0.2));
                if chunk > 1 {
                    assert!((progress.sps - 666.7).abs() < 1.0, "{}", progress.sps);
                }
            }
            steps += 1000;
            progress.count(steps, at(landed));
            assert!((progress.sps - 666.7).abs() < 1.0, "{}", progress.sps);
        }
        progress.count(steps, at(6.0 + STALLED - 1.0));
        assert!(progress.sps > 0.0);
        progress.count(steps, at(6.0 + STALLED));
        assert_eq!(progress.sps, 0.0);
    }
}
