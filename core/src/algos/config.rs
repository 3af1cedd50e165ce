//! The `[algo]` section: `name` picks the algorithm ("ppo" when absent, so older PPO presets
//! keep loading unchanged) and the other keys are that algorithm's own config, each with its
//! defaults; a key another algorithm owns is an unknown key.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::a2c::A2cConfig;
use super::bc::BcConfig;
use super::dqn::DqnConfig;
use super::impala::ImpalaConfig;
use super::maml::MamlConfig;
use super::pearl::PearlConfig;
use super::pg::PgOptions;
use super::ppo::PpoConfig;
use super::sac::SacConfig;
use super::td3::{Td3Config, DDPG_DEFAULTS};
use super::trpo::TrpoConfig;
use super::vpg::VpgConfig;
use super::vtrace::VtraceClips;
use crate::config::error::{check, ConfigError};

/// What every algorithm's `[algo]` section answers, implemented beside each algorithm.
pub trait AlgoSection {
    /// Discount gamma.
    fn discount(&self) -> f64;
    /// Checks ranges serde cannot; `batch` is the env steps of one training batch.
    fn validate(&self, batch: u64) -> Result<(), ConfigError>;
    /// Called once parsing is done with the `name` the section was read under (MAML's three
    /// names share one section and differ in the outer step).
    fn parsed_as(&mut self, _name: &'static str) {}
    /// The advantage and entropy options, for the sections that have them.
    fn options(&self) -> Option<&PgOptions> {
        None
    }
    /// [`AlgoSection::options`], to fill in while parsing.
    fn options_mut(&mut self) -> Option<&mut PgOptions> {
        None
    }
}

/// `rest` with each nested table (`[algo.explore]`, `[algo.replay]`, ...) filled in from the
/// section's own defaults for that table, not from the table type's: a SAC config that writes
/// `[algo.explore] random_steps = 1000` keeps SAC's exploration (no epsilon, no added noise)
/// and `[algo.replay] min_size = 500` SAC's batch of 256, where serde alone would take
/// epsilon-greedy's 1.0 -> 0.05 and a batch of 32 for every key not written. Keys the
/// section does not know stay, so they are still refused by name.
fn over_nested_defaults<S: Serialize>(rest: toml::Value, section: &S) -> toml::Value {
    fn fill(table: &mut toml::Table, defaults: &toml::Table) {
        for (key, value) in table.iter_mut() {
            if let (toml::Value::Table(inner), Some(toml::Value::Table(own))) =
                (value, defaults.get(key))
            {
                fill(inner, own);
                for (key, default) in own {
                    inner.entry(key.clone()).or_insert_with(|| default.clone());
                }
            }
        }
    }
    let (toml::Value::Table(mut table), Ok(defaults)) =
        (rest.clone(), toml::Table::try_from(section))
    else {
        return rest;
    };
    fill(&mut table, &defaults);
    toml::Value::Table(table)
}

/// The section `S` read from `rest`: the keys of [`PgOptions`] go into its `options` (over
/// its defaults) when it has them, every other key into `S` itself, so a key of the group
/// is an unknown key of a section without it.
fn parse_section<S>(
    name: &'static str,
    rest: toml::Value,
) -> Result<S, serde_path_to_error::Error<toml::de::Error>>
where
    S: AlgoSection + Default + Serialize + serde::de::DeserializeOwned,
{
    let mut section = S::default();
    let rest = over_nested_defaults(rest, &section);
    let Some(defaults) = section.options() else {
        let mut section: S = serde_path_to_error::deserialize(rest)?;
        section.parsed_as(name);
        return Ok(section);
    };
    let mut options = toml::Table::try_from(defaults).expect("the options serialise");
    let mut own = match rest {
        toml::Value::Table(table) => table,
        other => return serde_path_to_error::deserialize(other),
    };
    for key in PgOptions::KEYS {
        if let Some(value) = own.remove(*key) {
            options.insert(key.to_string(), value);
        }
    }
    section = serde_path_to_error::deserialize(toml::Value::Table(own))?;
    let options = serde_path_to_error::deserialize(toml::Value::Table(options))?;
    *section.options_mut().expect("the section has options") = options;
    section.parsed_as(name);
    Ok(section)
}

/// The one table of algorithms: each line gives the variant, its `[algo]` section's type, the
/// `name` it is written with and its doc. It generates [`AlgoConfig`], [`ALGO_NAMES`], the
/// name of a config, the parser (with the key of a mistyped value) and the serialiser; what
/// the rest of the system needs to know about each algorithm is its registry entry
/// ([`super::registry::spec`]).
macro_rules! algorithms {
    ($($(#[doc = $doc:literal])* $variant:ident($section:ty) = $name:literal,)+) => {
        /// Which algorithm trains, with its hyperparameters.
        #[derive(Debug, Clone, PartialEq)]
        pub enum AlgoConfig {
            $($(#[doc = $doc])* $variant($section),)+
        }

        /// The `name` values, in the order of [`AlgoConfig`]'s variants.
        pub const ALGO_NAMES: &[&str] = &[$($name),+];

        impl AlgoConfig {
            /// The `name` this config is written with.
            pub fn name(&self) -> &'static str {
                match self {
                    $(AlgoConfig::$variant(_) => $name,)+
                }
            }

            /// The algorithm's own section.
            pub fn section(&self) -> &dyn AlgoSection {
                match self {
                    $(AlgoConfig::$variant(c) => c,)+
                }
            }

            /// The section `name` owns, read from `rest` (the `[algo]` table without `name`).
            fn parse(
                name: &str,
                rest: toml::Value,
            ) -> Option<Result<AlgoConfig, serde_path_to_error::Error<toml::de::Error>>> {
                Some(match name {
                    $($name => parse_section::<$section>($name, rest).map(AlgoConfig::$variant),)+
                    _ => return None,
                })
            }

            /// The section's keys as a TOML table (without `name`).
            fn to_table(&self) -> Result<toml::Table, toml::ser::Error> {
                match self {
                    $(AlgoConfig::$variant(c) => {
                        let mut table = toml::Table::try_from(c)?;
                        if let Some(options) = AlgoSection::options(c) {
                            table.extend(toml::Table::try_from(options)?);
                        }
                        Ok(table)
                    })+
                }
            }
        }
    };
}

algorithms! {
    /// Proximal Policy Optimization.
    Ppo(PpoConfig) = "ppo",
    /// Advantage actor-critic.
    A2c(A2cConfig) = "a2c",
    /// Vanilla policy gradient (REINFORCE with a baseline), garage's options.
    Vpg(VpgConfig) = "vpg",
    /// Trust Region Policy Optimization.
    Trpo(TrpoConfig) = "trpo",
    /// IMPALA's V-trace actor-critic.
    Impala(ImpalaConfig) = "impala",
    /// Deep Q-learning (off-policy, replay).
    Dqn(DqnConfig) = "dqn",
    /// Soft actor-critic (off-policy, replay).
    Sac(SacConfig) = "sac",
    /// Twin delayed DDPG (off-policy, replay).
    Td3(Td3Config) = "td3",
    /// Deep deterministic policy gradient: TD3's config with DDPG's defaults.
    Ddpg(Td3Config) = "ddpg",
    /// Behaviour cloning from demos or an expert checkpoint.
    Bc(BcConfig) = "bc",
    /// MAML meta-RL with a VPG outer step (on tasks).
    MamlVpg(MamlConfig) = "maml_vpg",
    /// MAML meta-RL with a PPO outer step (on tasks).
    MamlPpo(MamlConfig) = "maml_ppo",
    /// MAML meta-RL with a TRPO outer step (on tasks).
    MamlTrpo(MamlConfig) = "maml_trpo",
    /// PEARL meta-RL: a context encoder and a latent-conditioned SAC (off-policy, on tasks).
    Pearl(PearlConfig) = "pearl",
}

impl Default for AlgoConfig {
    fn default() -> Self {
        AlgoConfig::Ppo(PpoConfig::default())
    }
}

impl AlgoConfig {
    /// Stages of acting per item: `num_grad_updates + 1` for MAML (each stage acts with the
    /// policy the last one adapted), 1 for every other algorithm.
    pub fn stages(&self) -> u32 {
        self.as_maml().map_or(1, |maml| maml.num_grad_updates + 1)
    }

    /// The MAML config, if the algorithm is meta-RL on tasks.
    pub fn as_maml(&self) -> Option<&MamlConfig> {
        match self {
            AlgoConfig::MamlVpg(c) | AlgoConfig::MamlPpo(c) | AlgoConfig::MamlTrpo(c) => Some(c),
            _ => None,
        }
    }

    /// The PEARL config, if PEARL is the algorithm.
    pub fn as_pearl(&self) -> Option<&PearlConfig> {
        match self {
            AlgoConfig::Pearl(c) => Some(c),
            _ => None,
        }
    }

    /// Discount gamma, whichever algorithm.
    pub fn discount(&self) -> f64 {
        self.section().discount()
    }

    /// V-trace's clips when the algorithm takes V-trace targets in place of GAE (PPO and A2C
    /// with `[algo.vtrace]`; IMPALA always uses V-trace, with its own keys).
    pub fn vtrace(&self) -> Option<&VtraceClips> {
        match self {
            AlgoConfig::Ppo(c) => c.vtrace.as_ref(),
            AlgoConfig::A2c(c) => c.vtrace.as_ref(),
            _ => None,
        }
    }

    /// Whether the algorithm learns from a replay table of transitions (the off-policy
    /// actor and learner loops) rather than from on-policy rollouts.
    pub fn is_off_policy(&self) -> bool {
        matches!(
            self,
            AlgoConfig::Dqn(_)
                | AlgoConfig::Sac(_)
                | AlgoConfig::Td3(_)
                | AlgoConfig::Ddpg(_)
                | AlgoConfig::Bc(_)
        )
    }

    /// The keys naming demos the learner inserts into its table, for `fleetrl train` to
    /// resolve (`minari:` datasets): BC's `algo.demos`, an off-policy table's
    /// `algo.replay.initial_demos`.
    pub fn demo_sources_mut(&mut self) -> Vec<(&'static str, &mut Option<String>)> {
        match self {
            AlgoConfig::Bc(c) => vec![("algo.demos", &mut c.demos)],
            AlgoConfig::Dqn(c) => vec![("algo.replay.initial_demos", &mut c.replay.initial_demos)],
            AlgoConfig::Sac(c) => vec![("algo.replay.initial_demos", &mut c.replay.initial_demos)],
            AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => {
                vec![("algo.replay.initial_demos", &mut c.replay.initial_demos)]
            }
            _ => Vec::new(),
        }
    }

    /// The PPO config, if PPO is the algorithm.
    pub fn as_ppo(&self) -> Option<&PpoConfig> {
        match self {
            AlgoConfig::Ppo(c) => Some(c),
            _ => None,
        }
    }

    /// Checks ranges serde cannot; `batch` is the env steps of one training batch.
    pub fn validate(&self, batch: u64) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.discount()),
            "algo.discount",
            "must be in [0, 1]",
        )?;
        self.section().validate(batch)
    }
}

impl Serialize for AlgoConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let inner = self.to_table();
        let mut table = inner.map_err(serde::ser::Error::custom)?;
        table.insert("name".into(), toml::Value::String(self.name().into()));
        table.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AlgoConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(deserializer)?;
        let name = match table.remove("name") {
            None => "ppo".to_string(),
            Some(toml::Value::String(name)) => name,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "algo.name must be a string, got {other}"
                )))
            }
        };
        if name == "ddpg" {
            for (key, value) in DDPG_DEFAULTS {
                let value = match key {
                    "target_noise" => toml::Value::Float(value as f64),
                    _ => toml::Value::Integer(value),
                };
                table.entry(key).or_insert(value);
            }
        }
        let rest = toml::Value::Table(table);
        let err = |e: serde_path_to_error::Error<toml::de::Error>| {
            let message = e.inner().to_string();
            let path = e.path().to_string();
            let key = match path.as_str() {
                "" | "." => "algo".to_string(),
                inner => format!("algo.{inner}"),
            };
            let message = message
                .split("\nin `")
                .next()
                .unwrap_or_default()
                .trim_end();
            D::Error::custom(format!("{key}: {message} (algo.name = \"{name}\")"))
        };
        match AlgoConfig::parse(&name, rest) {
            Some(parsed) => parsed.map_err(err),
            None => Err(D::Error::custom(format!(
                "unknown algo.name `{name}`{}; expected one of {}",
                crate::suggest::did_you_mean(&name, ALGO_NAMES.iter().copied()),
                ALGO_NAMES.join(", ")
            ))),
        }
    }
}
