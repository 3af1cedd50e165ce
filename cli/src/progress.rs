//! The progress display: a bar on a terminal, a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::LearnerStatus;
use indicatif::{ProgressBar, ProgressStyle};

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
        let (since, steps_then) = self.window;
        let dt = since.elapsed().as_secs_f64();
        if dt >= 1.0 {
            self.sps = status.env_steps_trained.saturating_sub(steps_then) as f64 / dt;
            self.window = (Instant::now(), status.env_steps_trained);
        }
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
