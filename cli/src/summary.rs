//! `summary.json`: what a run did, for people and for scripts.

use std::path::Path;

use anyhow::Context;
use fleetrl_core::acting::eval::EvalResult;
use fleetrl_core::config::RunConfig;
use fleetrl_proto::v1::LearnerStatus;
use serde::Serialize;

/// A success rate and PEARL's controls for it (with no context, with another task's belief,
/// where known) as evaluations print them, with `digits` decimals: `45% (no context 50%,
/// another task's belief 25%)`.
pub(crate) fn success_text(rate: f64, controls: [Option<f64>; 2], digits: usize) -> String {
    let percent = |r: f64| format!("{:.digits$}%", 100.0 * r);
    let named: Vec<String> = ["no context", "another task's belief"]
        .iter()
        .zip(controls)
        .filter_map(|(what, r)| r.map(|r| format!("{what} {}", percent(r))))
        .collect();
    match named.is_empty() {
        true => percent(rate),
        false => format!("{} ({})", percent(rate), named.join(", ")),
    }
}

/// One evaluation of the deterministic policy.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Evaluation {
    pub(crate) env_steps: u64,
    pub(crate) policy_version: i64,
    /// The env seed of its first episode (episode i plays from `seed + i`): `fleetrl eval`'s
    /// default for this checkpoint.
    pub(crate) seed: u64,
    pub(crate) mean_return: f64,
    pub(crate) std_return: f64,
    /// Meta-RL: mean return over the test tasks before adaptation, then after each step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) adaptation_returns: Vec<f64>,
    /// The share of evaluated (meta-RL: adapted) episodes that solved their task, for envs
    /// with a success flag (Meta-World).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) success_rate: Option<f64>,
    /// PEARL: the share of test tasks solved with no context (the prior's mean `z`): without
    /// adapting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) success_rate_no_context: Option<f64>,
    /// PEARL: the share of test tasks solved with the next test task's adapted `z` in place
    /// of their own: the control to set `success_rate` against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) success_rate_other_task: Option<f64>,
    /// An evaluation at or above the target, played again on `eval.confirm_episodes` fresh
    /// start states: the run is solved only if this also reaches the target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) confirmation: Option<Confirmation>,
    pub(crate) wall_seconds: f64,
    pub(crate) checkpoint: String,
}

impl Evaluation {
    /// Whether its confirmation reached `target`.
    pub(crate) fn solved(&self, target: Option<f64>) -> bool {
        let confirmed = self.confirmation.as_ref().map(|c| c.mean_return);
        target.zip(confirmed).is_some_and(|(t, got)| got >= t)
    }
}

/// The confirming evaluation of a checkpoint that reached the target.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Confirmation {
    /// Episodes played (meta-RL: test tasks).
    pub(crate) episodes: usize,
    /// The env seed of its first episode, the one after its evaluation's last.
    pub(crate) seed: u64,
    pub(crate) mean_return: f64,
    /// The standard error of `mean_return` (the returns' sample standard deviation over the
    /// square root of their count).
    pub(crate) std_error: f64,
}

impl Confirmation {
    pub(crate) fn of(result: &EvalResult, seed: u64) -> Confirmation {
        Confirmation {
            episodes: result.returns.len(),
            seed,
            mean_return: result.mean(),
            std_error: result.std_error(),
        }
    }
}

/// The run's outcome (DESIGN.md's contract fields first).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) env: String,
    pub(crate) algo: String,
    pub(crate) total_env_steps: u64,
    pub(crate) wall_seconds: f64,
    /// Env steps this learner process trained per second of its uptime (a resumed run's
    /// checkpoint steps were taken by another process, in other seconds).
    pub(crate) env_steps_per_second: f64,
    pub(crate) final_eval_return: f64,
    /// Meta-RL: the last evaluation's mean test-task return before adaptation, then after each
    /// step (`final_eval_return` is the adapted one, what the stop target applies to).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) final_adaptation_returns: Vec<f64>,
    /// The last evaluation's success rate, for envs with a success flag (Meta-World).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) final_success_rate: Option<f64>,
    /// PEARL: the last evaluation's success rate with no context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) final_success_rate_no_context: Option<f64>,
    /// PEARL: the last evaluation's success rate with another task's belief.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) final_success_rate_other_task: Option<f64>,
    pub(crate) eval_episodes: u32,
    /// Whether the last evaluation reached the target and its confirmation did too.
    pub(crate) solved: bool,
    /// The last evaluation's confirmation: its mean return, over `confirm_episodes` start
    /// states no evaluation played before (absent when it was below the target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) confirm_mean_return: Option<f64>,
    /// The standard error of `confirm_mean_return`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) confirm_std_error: Option<f64>,
    /// Episodes of a confirming evaluation (`eval.confirm_episodes`).
    pub(crate) confirm_episodes: u32,
    pub(crate) checkpoint: String,
    pub(crate) target_return: Option<f64>,
    /// `solved`, `step_budget`, `wall_clock`, `interrupted`, or `failed` (with `error`).
    pub(crate) stop_reason: String,
    /// Why a failed run stopped (a role's exit and its log's last lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    pub(crate) seed: u64,
    pub(crate) actors: u32,
    pub(crate) policy_version: i64,
    pub(crate) updates: u64,
    pub(crate) recent_training_return: Option<f64>,
    /// Rollouts the learner dropped for lagging the policy more than actors.max_policy_lag.
    pub(crate) rollouts_dropped: u64,
    /// Rollouts in the batches the learner trained on (on-policy).
    pub(crate) rollouts_trained: u64,
    /// Mean policy lag of the trained rollouts over the run, in versions (on-policy). Absent
    /// for a run that trained no rollouts: replayed items carry no policy version, so the
    /// learner cannot tell how far an off-policy actor acted ahead of it
    /// (`bench/policy_lag.sh` measures that from the roles' metrics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mean_policy_lag: Option<f64>,
    pub(crate) evaluations: Vec<Evaluation>,
}

/// The env steps of `steps` that this learner process trained, per second of its uptime.
fn steps_per_second(steps: u64, status: &LearnerStatus) -> f64 {
    let own = steps.saturating_sub(status.env_steps_at_start);
    own as f64 / status.seconds_since_start.max(1e-9)
}

impl Summary {
    pub(crate) fn new(
        config: &RunConfig,
        status: &LearnerStatus,
        last: &Evaluation,
        evaluations: &[Evaluation],
        wall_seconds: f64,
        reason: &str,
    ) -> Summary {
        let steps = last.env_steps.max(status.env_steps_trained);
        Summary {
            env: config.env.id.clone(),
            algo: config.algo.name().into(),
            total_env_steps: steps,
            wall_seconds,
            env_steps_per_second: steps_per_second(steps, status),
            final_eval_return: last.mean_return,
            final_adaptation_returns: last.adaptation_returns.clone(),
            final_success_rate: last.success_rate,
            final_success_rate_no_context: last.success_rate_no_context,
            final_success_rate_other_task: last.success_rate_other_task,
            eval_episodes: config.eval.episodes,
            solved: last.solved(config.stop.target_return),
            confirm_mean_return: last.confirmation.as_ref().map(|c| c.mean_return),
            confirm_std_error: last.confirmation.as_ref().map(|c| c.std_error),
            confirm_episodes: config.eval.confirm_episodes,
            checkpoint: last.checkpoint.clone(),
            target_return: config.stop.target_return,
            stop_reason: reason.to_string(),
            error: None,
            seed: config.seed,
            actors: config.actors.count,
            policy_version: last.policy_version,
            updates: status.updates,
            recent_training_return: status
                .recent_return
                .is_finite()
                .then_some(status.recent_return),
            rollouts_dropped: status.rollouts_dropped,
            rollouts_trained: status.rollouts_trained,
            mean_policy_lag: (status.rollouts_trained > 0).then_some(status.mean_policy_lag),
            evaluations: evaluations.to_vec(),
        }
    }

    pub(crate) fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("summary always serialises");
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run resumed at 100k env steps that trained 50k more in 10 s ran at 5k steps/s, not
    /// 15k; a fresh run counts every step.
    #[test]
    fn steps_per_second_counts_this_process_only() {
        let resumed = LearnerStatus {
            env_steps_trained: 150_000,
            env_steps_at_start: 100_000,
            seconds_since_start: 10.0,
            ..LearnerStatus::default()
        };
        assert_eq!(steps_per_second(150_000, &resumed), 5_000.0);
        let fresh = LearnerStatus {
            env_steps_at_start: 0,
            ..resumed
        };
        assert_eq!(steps_per_second(150_000, &fresh), 15_000.0);
    }
}
