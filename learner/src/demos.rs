//! Demo files as a table's first items: BC's `algo.demos` (observation and the expert's
//! action) and an off-policy table's `algo.replay.initial_demos`, every demo step one
//! transition (n-step returns with the algorithm's horizon and discount, as its actors would
//! insert them), inserted by the learner before it samples.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::algos::registry;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_core::items::transition::{NStep, StepIn};
use fleetrl_core::replay_client::{Writer, WriterOptions};
use fleetrl_proto::TensorMap;
use fleetrl_runtime::demo;

/// The table items of every demo in `dir`, checked against the run's env.
pub(crate) fn items(config: &RunConfig, dir: &str) -> anyhow::Result<Vec<TensorMap>> {
    anyhow::ensure!(
        !dir.starts_with("minari:"),
        "{dir} is a Minari dataset: `fleetrl train` converts it into demo files before the \
         learner starts; a learner started on its own reads a directory of demo files (convert \
         the dataset once with `fleetrl train`, then point the key at <out>/minari/...)"
    );
    let demos =
        demo::read_dir(Path::new(dir)).with_context(|| format!("reading the demos in {dir}"))?;
    anyhow::ensure!(
        !demos.is_empty(),
        "no demo files ({}) in {dir}",
        demo::EXTENSION
    );
    let env = envs::make_configured(&config.env)?;
    let (n_step, discount) = registry::spec(config)
        .acting
        .map_or((1, config.algo.discount()), |a| (a.n_step, a.discount));
    let mut items = Vec::new();
    for d in &demos {
        d.check_env(
            &config.env.id,
            &env.observation_space(),
            &env.action_space(),
        )
        .with_context(|| format!("the demos in {dir}"))?;
        let mut n_steps = NStep::new(n_step, discount);
        for t in 0..d.len() {
            let last = t + 1 == d.len();
            let step = StepIn {
                obs: d.obs(t).to_vec(),
                action: d.action(t),
                reward: d.rewards[t],
                terminated: last && d.terminated,
                truncated: last && !d.terminated,
                next_obs: d.obs(t + 1).to_vec(),
            };
            items.extend(n_steps.push(step).iter().map(|tr| tr.to_item(0)));
        }
    }
    tracing::info!(
        demos = demos.len(),
        steps = items.len(),
        dir,
        "loaded the table's demos"
    );
    Ok(items)
}

/// Inserts `items` into `table` and waits for every acknowledgement.
pub(crate) async fn insert(
    shards: &[String],
    table: &str,
    items: Vec<TensorMap>,
) -> anyhow::Result<()> {
    let mut options = WriterOptions::new(table);
    options.max_items_per_request = 256;
    options.max_in_flight = 1024;
    options.connect_patience = Duration::from_secs(60);
    let (writer, task) = Writer::spawn(shards.to_vec(), options);
    for item in items {
        writer.insert(item, 1.0).await?;
    }
    drop(writer);
    task.finish().await.context("inserting the demos")
}
