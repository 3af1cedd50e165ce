//! BC from demo files: every demo step becomes a table item (observation and the expert's
//! action), inserted by the learner before it samples.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_core::items::transition::Transition;
use fleetrl_core::replay_client::{Writer, WriterOptions};
use fleetrl_proto::TensorMap;
use fleetrl_runtime::demo;

/// The table items of every demo in `dir`, checked against the run's env.
pub(crate) fn items(config: &RunConfig, dir: &str) -> anyhow::Result<Vec<TensorMap>> {
    let demos =
        demo::read_dir(Path::new(dir)).with_context(|| format!("reading the BC demos in {dir}"))?;
    anyhow::ensure!(
        !demos.is_empty(),
        "no demo files ({}) in {dir}",
        demo::EXTENSION
    );
    let env = envs::make_configured(&config.env)?;
    let mut items = Vec::new();
    for d in &demos {
        d.check_env(
            &config.env.id,
            &env.observation_space(),
            &env.action_space(),
        )?;
        for t in 0..d.len() {
            let transition = Transition {
                obs: d.obs(t).to_vec(),
                action: d.action(t),
                reward: d.rewards[t],
                discount: 0.0,
                next_obs: d.obs(t + 1).to_vec(),
            };
            items.push(transition.to_item(0));
        }
    }
    tracing::info!(
        demos = demos.len(),
        steps = items.len(),
        dir,
        "loaded BC demos"
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
    task.finish().await.context("inserting the BC demos")
}
