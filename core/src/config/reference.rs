//! `docs/config-reference.md`, generated from the config structs themselves: every key of
//! every section with its default (serialised from the `Default`s) and its doc comment (read
//! from the struct's source), so the page cannot drift from the code. The test below fails
//! when the page is stale; `FLEETRL_BLESS=1 cargo test -p fleetrl-core config_reference`
//! writes it anew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{AlgoConfig, RunConfig, ALGO_NAMES};

/// One field of a config struct, as its source declares it.
#[derive(Clone)]
struct Field {
    name: String,
    ty: String,
    doc: String,
}

/// Every `pub struct` in `core/src` with its public fields, by name.
fn structs(root: &Path) -> BTreeMap<String, Vec<Field>> {
    let mut found = BTreeMap::new();
    for path in rust_files(root) {
        let text = std::fs::read_to_string(&path).expect("readable source");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.strip_prefix("pub struct ") else {
                continue;
            };
            let Some(name) = rest.strip_suffix(" {") else {
                continue;
            };
            found.insert(name.to_string(), fields(&lines[i + 1..]));
        }
    }
    found
}

/// The fields from the line after `pub struct X {` to its closing brace.
fn fields(lines: &[&str]) -> Vec<Field> {
    let mut out = Vec::new();
    let mut doc = Vec::new();
    let mut skipped = false;
    for line in lines {
        if *line == "}" {
            break;
        }
        let line = line.trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_string());
        } else if line.starts_with("#[serde(skip") {
            // Not a key: set by the code, never read from a file.
            skipped = true;
        } else if let Some(decl) = line.strip_prefix("pub ") {
            if let Some((name, ty)) = decl.split_once(": ").filter(|_| !skipped) {
                out.push(Field {
                    name: name.to_string(),
                    ty: ty.trim_end_matches(',').to_string(),
                    doc: doc.join(" "),
                });
            }
            doc.clear();
            skipped = false;
        } else if !line.starts_with("#[") {
            doc.clear();
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("source dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The struct a field's type names, if it is one (`Option<T>` is `T`).
fn inner_type(ty: &str) -> &str {
    ty.strip_prefix("Option<")
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(ty)
}

/// A default as the page shows it.
fn show(value: Option<&toml::Value>) -> String {
    match value {
        None => "unset".to_string(),
        Some(toml::Value::String(s)) => format!("`\"{s}\"`"),
        Some(other) => format!("`{other}`"),
    }
}

/// One section's table, then its sub-sections (fields whose type is another config struct).
fn section(
    out: &mut String,
    heading: &str,
    key: &str,
    ty: &str,
    defaults: &toml::Table,
    all: &BTreeMap<String, Vec<Field>>,
) {
    let fields = &all[ty];
    out.push_str(&format!(
        "\n### `{heading}`\n\n| key | default | meaning |\n|---|---|---|\n"
    ));
    let mut nested = Vec::new();
    for field in fields {
        if all.contains_key(inner_type(&field.ty)) {
            nested.push(field);
            continue;
        }
        let doc = field.doc.replace('|', "\\|");
        let default = show(defaults.get(&field.name));
        out.push_str(&format!("| `{}` | {default} | {doc} |\n", field.name));
    }
    for field in nested {
        let empty = toml::Table::new();
        let inner = match defaults.get(&field.name) {
            Some(toml::Value::Table(t)) => t,
            _ => &empty,
        };
        let key = format!("{key}.{}", field.name);
        section(
            out,
            &format!("[{key}]"),
            &key,
            inner_type(&field.ty),
            inner,
            all,
        );
    }
}

/// The variant names and section types of the algorithm table, in its order.
fn algorithm_sections(root: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root.join("algos/config.rs")).expect("algos/config.rs");
    let body = text.split("\nalgorithms! {\n").nth(1).expect("the table");
    let body = body.split("\n}\n").next().expect("its end");
    body.lines()
        .filter_map(|line| {
            let (variant, rest) = line.trim().split_once('(')?;
            let (ty, name) = rest.split_once(") = \"")?;
            let _ = variant;
            Some((name.trim_end_matches("\",").to_string(), ty.to_string()))
        })
        .collect()
}

/// The whole page.
pub(crate) fn markdown(root: &Path) -> String {
    let all = structs(root);
    let defaults = toml::Table::try_from(RunConfig::default()).expect("defaults serialise");
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from the config structs' defaults and doc comments by \
         `core/src/config/reference.rs`; a test fails when it is stale. How the layers combine \
         (defaults, file, `--set`) and the presets: [configuration.md](configuration.md).\n\n\
         ## The run\n",
    );
    let run = &all["RunConfig"];
    out.push_str("\n| key | default | meaning |\n|---|---|---|\n");
    let plain = |f: &&Field| !all.contains_key(inner_type(&f.ty)) && f.ty != "AlgoConfig";
    for field in run.iter().filter(plain) {
        let default = show(defaults.get(&field.name));
        out.push_str(&format!(
            "| `{}` | {default} | {} |\n",
            field.name, field.doc
        ));
    }
    for field in run {
        let ty = inner_type(&field.ty);
        if ty == "AlgoConfig" || !all.contains_key(ty) {
            continue;
        }
        let Some(toml::Value::Table(table)) = defaults.get(&field.name) else {
            continue;
        };
        section(
            &mut out,
            &format!("[{}]", field.name),
            &field.name,
            ty,
            table,
            &all,
        );
    }
    out.push_str(
        "\n## `[algo]`, one section per algorithm\n\n`algo.name` picks the algorithm \
         (`\"ppo\"` when absent); the other keys are that algorithm's own.\n",
    );
    let sections = algorithm_sections(root);
    assert_eq!(
        sections.len(),
        ALGO_NAMES.len(),
        "every algorithm has a line"
    );
    for (name, ty) in sections {
        let parsed: AlgoConfig =
            toml::from_str(&format!("name = \"{name}\"")).expect("an algorithm's defaults parse");
        let mut table = toml::Table::try_from(&parsed).expect("defaults serialise");
        table.remove("name");
        let heading = format!("[algo] name = \"{name}\"");
        if parsed.section().options().is_some() {
            // The advantage and entropy keys are written beside the section's own.
            let mut with_options = all.clone();
            let group = all["PgOptions"].clone();
            with_options
                .get_mut(&ty)
                .expect("the section")
                .extend(group);
            section(&mut out, &heading, "algo", &ty, &table, &with_options);
        } else {
            section(&mut out, &heading, "algo", &ty, &table, &all);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page in docs/ is what the code declares; regenerate it with `FLEETRL_BLESS=1`.
    #[test]
    fn config_reference_is_current() {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let page = crate_dir.join("../docs/config-reference.md");
        let fresh = markdown(&crate_dir.join("src"));
        if std::env::var("FLEETRL_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&page, &fresh).expect("writable docs/");
            return;
        }
        let written = std::fs::read_to_string(&page).unwrap_or_default();
        assert!(
            written == fresh,
            "docs/config-reference.md is stale: a config field, its default or its doc \
             changed. Regenerate it with `FLEETRL_BLESS=1 cargo test --release -p fleetrl-core \
             config_reference` and commit the page"
        );
    }

    /// Every key a config can be written with appears on the page: a field the parser
    /// (`deny_unknown_fields`) accepts but the page misses would be an undocumented key.
    #[test]
    fn every_default_key_is_on_the_page() {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let page = markdown(&crate_dir.join("src"));
        let defaults = toml::Table::try_from(RunConfig::default()).unwrap();
        fn keys(table: &toml::Table, out: &mut Vec<String>) {
            for (key, value) in table {
                match value {
                    toml::Value::Table(inner) => keys(inner, out),
                    _ => out.push(key.clone()),
                }
            }
        }
        let mut all = Vec::new();
        keys(&defaults, &mut all);
        // `algo.name` picks the section; the page says so in prose.
        all.retain(|key| key != "name");
        for key in all {
            assert!(
                page.contains(&format!("| `{key}` |")),
                "`{key}` is not on the page"
            );
        }
    }
}
