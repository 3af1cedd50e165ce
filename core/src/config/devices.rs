//! Where the learner runs: its devices (data-parallel replicas in one process), its place
//! among several learner processes, and the element type of the weights it broadcasts.
//!
//! `learner.device` names one device; `learner.devices` lists several (or `"auto"`). With
//! `devices` empty (the default) the learner runs on `device` alone. With `devices` set, the
//! first device listed holds the master parameters and the optimiser, and `device` must be
//! left at its default or name that same first device.

use serde::{Deserialize, Serialize};
use tch::Device;

use super::{ConfigError, LearnerConfig};

/// `learner.devices`: a list of device names, or the word `"auto"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeviceList {
    /// `"auto"`: every GPU libtorch sees, else the CPU.
    Word(String),
    /// Explicit devices, e.g. `["cuda:0", "cuda:1"]` or `["cpu", "cpu"]`.
    List(Vec<String>),
}

impl Default for DeviceList {
    fn default() -> Self {
        DeviceList::List(Vec::new())
    }
}

/// Element type of the weights the learner streams to actors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BroadcastDtype {
    /// Full precision.
    #[default]
    F32,
    /// Half precision: half the bytes on the wire; actors convert back to f32.
    F16,
}

/// Only algorithms that can split an update across devices accept more than one.
const MULTI_DEVICE_ALGOS: [&str; 1] = ["ppo"];

/// Algorithms whose every update is optimiser steps on the flat optimiser (and targets that
/// follow the parameters), so summing the gradients over learner processes keeps the ranks
/// identical. TRPO's natural-gradient step, MAML's adaptation and PEARL's context encoder do
/// not fit that shape.
const MULTI_PROCESS_ALGOS: [&str; 9] = [
    "ppo", "a2c", "impala", "vpg", "dqn", "sac", "td3", "ddpg", "bc",
];

/// `learner.collective_backend`: the c10d process group of several learner processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectiveBackend {
    /// NCCL when the learner's first device is a CUDA device, else gloo.
    #[default]
    Auto,
    /// gloo, on CPU tensors (a CUDA learner's gradients are staged through host memory).
    Gloo,
    /// NCCL, on CUDA devices only.
    Nccl,
}

/// A device name that is none of `cpu`, `cuda`, `cuda:N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be cpu, cuda or cuda:N, got `{0}`")]
pub struct UnknownDevice(pub String);

/// Parses `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(name: &str) -> Result<Device, UnknownDevice> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        other => match other.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
            Some(n) => Ok(Device::Cuda(n)),
            None => Err(UnknownDevice(other.to_string())),
        },
    }
}

/// A device this machine's libtorch cannot run on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnavailableDevice {
    /// A GPU was asked for and libtorch has no CUDA.
    #[error(
        "{0:?} was asked for but CUDA is not available to libtorch (no GPU visible, or the \
         binary was built with FLEETRL_LINK_CUDA=0)"
    )]
    NoCuda(Device),
    /// A GPU index past the last GPU libtorch sees.
    #[error("device {0:?} does not exist: libtorch sees {1} GPU(s)")]
    NoSuchGpu(Device, i64),
}

/// `Ok` when every one of `devices` exists on this machine. Configs are checked without it
/// (a launcher validates a config for a learner on another machine); the process that puts
/// tensors on the devices checks with it first.
pub fn check_available(devices: &[Device]) -> Result<(), UnavailableDevice> {
    let Some(gpu) = devices.iter().find(|d| d.is_cuda()) else {
        return Ok(());
    };
    if !tch::Cuda::is_available() {
        return Err(UnavailableDevice::NoCuda(*gpu));
    }
    let visible = tch::Cuda::device_count();
    match devices
        .iter()
        .find(|d| matches!(d, Device::Cuda(n) if *n as i64 >= visible))
    {
        Some(missing) => Err(UnavailableDevice::NoSuchGpu(*missing, visible)),
        None => Ok(()),
    }
}

/// `learner.rank`: a number, or the name of a StatefulSet's pod (`fleetrl-learner-1`), whose
/// ordinal after the last `-` is the rank, so a Kubernetes manifest passes the pod's own name
/// (downward API) and every replica of one pod template gets its rank.
pub(super) fn rank_or_pod_name<'de, D>(deserializer: D) -> Result<u32, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Rank;
    impl serde::de::Visitor<'_> for Rank {
        type Value = u32;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(RANK_EXPECTED)
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u32, E> {
            u32::try_from(n).map_err(|_| E::custom(format!("{RANK_EXPECTED}, got {n}")))
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u32, E> {
            u32::try_from(n).map_err(|_| E::custom(format!("{RANK_EXPECTED}, got {n}")))
        }

        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<u32, E> {
            rank_from_pod_name(name)
                .ok_or_else(|| E::custom(format!("{RANK_EXPECTED}, got `{name}`")))
        }
    }
    deserializer.deserialize_any(Rank)
}

const RANK_EXPECTED: &str = "must be a rank (0, 1, ...) or a StatefulSet pod name ending in \
                             its ordinal (`fleetrl-learner-1`: rank 1)";

/// The ordinal a StatefulSet gives its pod `name` (`<statefulset>-<ordinal>`).
fn rank_from_pod_name(name: &str) -> Option<u32> {
    let (set, ordinal) = name.rsplit_once('-')?;
    if set.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ordinal.parse().ok()
}

fn invalid(key: &'static str, message: String) -> ConfigError {
    ConfigError::Invalid { key, message }
}

impl LearnerConfig {
    /// The devices the update runs on, the master's first: `devices` resolved (`"auto"`
    /// asks libtorch how many GPUs it sees), or `[device]` when `devices` is empty. Errors
    /// name the key at fault: an unknown device, `device` and `devices` disagreeing, or an
    /// algorithm `algo` that trains on one device only.
    pub fn resolve_devices(&self, algo: &str) -> Result<Vec<Device>, ConfigError> {
        let single =
            parse_device(&self.device).map_err(|e| invalid("learner.device", e.to_string()))?;
        let devices = match &self.devices {
            DeviceList::List(names) if names.is_empty() => return Ok(vec![single]),
            DeviceList::List(names) => names
                .iter()
                .map(|n| parse_device(n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid("learner.devices", e.to_string()))?,
            DeviceList::Word(word) if word == "auto" => {
                let gpus = tch::Cuda::device_count();
                if gpus > 0 {
                    (0..gpus as usize).map(Device::Cuda).collect()
                } else {
                    vec![Device::Cpu]
                }
            }
            DeviceList::Word(other) => {
                return Err(invalid(
                    "learner.devices",
                    format!("must be a list of devices or \"auto\", got `{other}`"),
                ))
            }
        };
        if self.device != LearnerConfig::default().device && single != devices[0] {
            return Err(invalid(
                "learner.device",
                format!(
                    "`{}` conflicts with learner.devices, whose first entry ({:?}) holds the \
                     optimiser; set learner.devices alone",
                    self.device, devices[0]
                ),
            ));
        }
        if devices.len() > 1 && !MULTI_DEVICE_ALGOS.contains(&algo) {
            return Err(invalid(
                "learner.devices",
                format!(
                    "algo.name = \"{algo}\" updates on one device only; use one device or \
                     one of: {}",
                    MULTI_DEVICE_ALGOS.join(", ")
                ),
            ));
        }
        Ok(devices)
    }

    /// Checks what can be checked without a GPU: device names, `device` against `devices`,
    /// the algorithm against several devices, and `rank` / `world_size`.
    pub(super) fn check_devices(&self, algo: &str) -> Result<(), ConfigError> {
        if !matches!(&self.devices, DeviceList::Word(w) if w == "auto") {
            self.resolve_devices(algo)?;
        }
        if self.world_size == 0 {
            return Err(invalid("learner.world_size", "must be >= 1".into()));
        }
        if self.rank >= self.world_size {
            return Err(invalid(
                "learner.rank",
                format!("must be below learner.world_size ({})", self.world_size),
            ));
        }
        if self.world_size > 1 {
            self.check_group(algo)?;
        }
        Ok(())
    }

    /// What several learner processes need: an algorithm that can, a `host:port`
    /// rendezvous, a positive timeout.
    fn check_group(&self, algo: &str) -> Result<(), ConfigError> {
        if !MULTI_PROCESS_ALGOS.contains(&algo) {
            return Err(invalid(
                "learner.world_size",
                format!(
                    "algo.name = \"{algo}\" trains in one learner process only; use \
                     learner.world_size = 1 or one of: {}",
                    MULTI_PROCESS_ALGOS.join(", ")
                ),
            ));
        }
        let port = self
            .rendezvous
            .rsplit_once(':')
            .and_then(|(host, port)| (!host.is_empty()).then_some(port)?.parse::<u16>().ok());
        if port.is_none() {
            return Err(invalid(
                "learner.rendezvous",
                format!("must be host:port (rank 0's), got `{}`", self.rendezvous),
            ));
        }
        if !(self.collective_timeout_s > 0.0 && self.collective_timeout_s.is_finite()) {
            return Err(invalid(
                "learner.collective_timeout_s",
                "must be a positive number of seconds".into(),
            ));
        }
        Ok(())
    }

    /// How this process joins the other learner processes, or `None` with `world_size` 1.
    /// `device` is the learner's first device (NCCL needs it to be a CUDA device).
    pub fn group_spec(
        &self,
        device: Device,
    ) -> Result<Option<crate::collective::GroupSpec>, ConfigError> {
        use crate::collective::{Backend, GroupSpec};
        if self.world_size <= 1 {
            return Ok(None);
        }
        let backend = match (self.collective_backend, device.is_cuda()) {
            (CollectiveBackend::Gloo, _) | (CollectiveBackend::Auto, false) => Backend::Gloo,
            (CollectiveBackend::Nccl, true) | (CollectiveBackend::Auto, true) => Backend::Nccl,
            (CollectiveBackend::Nccl, false) => {
                return Err(invalid(
                    "learner.collective_backend",
                    "nccl runs on CUDA devices; this learner's is the CPU (use gloo)".into(),
                ))
            }
        };
        Ok(Some(GroupSpec {
            rendezvous: self.rendezvous.clone(),
            rank: self.rank,
            world_size: self.world_size,
            backend,
            timeout: std::time::Duration::from_secs_f64(self.collective_timeout_s),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;

    fn load(sets: &[&str]) -> Result<RunConfig, ConfigError> {
        let mut table = toml::Table::new();
        for s in sets {
            crate::config::apply_override(&mut table, s)?;
        }
        let config: RunConfig =
            table
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Parse {
                    origin: "test".into(),
                    message: e.to_string(),
                })?;
        config.validate()?;
        Ok(config)
    }

    fn message(sets: &[&str]) -> String {
        load(sets).expect_err("should be refused").to_string()
    }

    #[test]
    fn devices_default_to_the_single_device() {
        let c = load(&[]).unwrap();
        assert_eq!(c.learner.resolve_devices("ppo").unwrap(), vec![Device::Cpu]);
        let c = load(&[r#"learner.devices=["cpu", "cpu", "cpu"]"#]).unwrap();
        assert_eq!(c.learner.resolve_devices("ppo").unwrap().len(), 3);
        let c = load(&["learner.devices=auto"]).unwrap();
        assert!(!c.learner.resolve_devices("ppo").unwrap().is_empty());
        let c = load(&["learner.broadcast_dtype=f16"]).unwrap();
        assert_eq!(c.learner.broadcast_dtype, BroadcastDtype::F16);
    }

    #[test]
    fn bad_device_settings_name_the_key() {
        assert!(message(&[r#"learner.devices=["cpu", "tpu"]"#]).contains("learner.devices"));
        assert!(message(&["learner.devices=everything"]).contains("\"auto\""));
        let conflict = message(&["learner.device=cuda:1", r#"learner.devices=["cpu"]"#]);
        assert!(conflict.contains("conflicts"), "{conflict}");
        let algo = message(&["algo.name=a2c", r#"learner.devices=["cpu", "cpu"]"#]);
        assert!(algo.contains("\"a2c\""), "{algo}");
        assert!(load(&["learner.world_size=2", "learner.rank=1"]).is_ok());
        let trpo = message(&["algo.name=trpo", "learner.world_size=2"]);
        assert!(
            trpo.contains("\"trpo\" trains in one learner process"),
            "{trpo}"
        );
        let addr = message(&["learner.world_size=2", "learner.rendezvous=leader"]);
        assert!(addr.contains("learner.rendezvous"), "{addr}");
        assert!(message(&["learner.rank=1"]).contains("learner.rank"));
    }

    #[test]
    fn rank_is_a_number_or_a_statefulset_pod_name() {
        let rank = |value: &str| {
            let text = format!("[learner]\nworld_size = 2\nrank = {value}\n");
            RunConfig::from_toml(&text, "test").map(|c| c.learner)
        };
        assert_eq!(rank("1").unwrap().rank, 1);
        assert_eq!(rank("\"fleetrl-learner-0\"").unwrap().rank, 0);
        assert_eq!(rank("\"fleetrl-learner-1\"").unwrap().rank, 1);
        let beyond = rank("\"fleetrl-learner-2\"").unwrap_err().to_string();
        assert!(beyond.contains("below learner.world_size (2)"), "{beyond}");
        for bad in [
            "\"learner\"",
            "\"learner-\"",
            "\"learner-+1\"",
            "\"-1\"",
            "-1",
            "\"\"",
        ] {
            let error = rank(bad).unwrap_err().to_string();
            assert!(
                error.contains("learner.rank: must be a rank (0, 1, ...) or a StatefulSet pod"),
                "{bad}: {error}"
            );
        }
        // Written back as the number, which the ranks compare.
        let learner = rank("\"fleetrl-learner-1\"").unwrap();
        let written = toml::to_string(&learner).unwrap();
        assert!(written.contains("\nrank = 1\n"), "{written}");
    }
}
