//! `--set dotted.key=value` overrides applied to a parsed TOML table.

use super::ConfigError;

/// Sets `key` (dotted path) to `value` in `table`. The value is parsed as a TOML value
/// (`3`, `1e-3`, `true`, `[64, 64]`, `"text"`); anything that does not parse is a string.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> Result<(), ConfigError> {
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| ConfigError::Override(assignment.to_string()))?;
    let parts: Vec<&str> = key.trim().split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::Override(assignment.to_string()));
    }
    let value = parse_value(raw.trim());
    let (last, parents) = parts.split_last().expect("split yields at least one part");
    let mut current = table;
    for part in parents {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry.as_table_mut().ok_or_else(|| ConfigError::Parse {
            origin: format!("--set {assignment}"),
            message: format!("`{part}` is not a section"),
        })?;
    }
    current.insert(last.to_string(), value);
    Ok(())
}

fn parse_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;

    #[test]
    fn sets_nested_typed_values() {
        let mut t = toml::Table::new();
        apply_override(&mut t, "actors.count=3").unwrap();
        apply_override(&mut t, "seed=7").unwrap();
        apply_override(&mut t, "env.id=CartPole-v1").unwrap();
        apply_override(&mut t, "model.hidden_sizes=[32, 32]").unwrap();
        let c: RunConfig = t.try_into().unwrap();
        assert_eq!((c.actors.count, c.seed), (3, 7));
        assert_eq!(c.model.hidden_sizes, vec![32, 32]);
    }

    #[test]
    fn rejects_missing_equals() {
        let mut t = toml::Table::new();
        assert!(matches!(
            apply_override(&mut t, "seed"),
            Err(ConfigError::Override(_))
        ));
    }
}
