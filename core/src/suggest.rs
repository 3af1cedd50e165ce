//! "Did you mean ...?" for names a user typed: presets, environment ids, algorithm names.

/// ` (did you mean `X`?)` for the known name nearest to `name` when it is near enough to be a
/// typo (at most a third of its characters edited, and at least one), else an empty string.
/// Case is ignored: `cartpole-v1` suggests `CartPole-v1`.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let typed = name.to_lowercase();
    let allowed = (typed.chars().count() / 3).max(1);
    known
        .into_iter()
        .map(|k| (edit_distance(&typed, &k.to_lowercase()), k))
        .filter(|&(d, _)| d <= allowed)
        .min_by_key(|&(d, _)| d)
        .map_or_else(String::new, |(_, k)| format!(" (did you mean `{k}`?)"))
}

/// Levenshtein distance in characters: insertions, deletions and substitutions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("ppo", ""), 3);
        assert_eq!(edit_distance("ppo", "ppo"), 0);
        assert_eq!(edit_distance("ppoo", "ppo"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_typo_names_the_nearest_and_a_stranger_names_nothing() {
        let presets = ["cartpole-ppo", "cartpole-dqn", "pendulum-sac"];
        assert_eq!(
            did_you_mean("cartpole-pp", presets),
            " (did you mean `cartpole-ppo`?)"
        );
        assert_eq!(
            did_you_mean("cartpole-v1", ["CartPole-v1", "Acrobot-v1"]),
            " (did you mean `CartPole-v1`?)"
        );
        assert_eq!(did_you_mean("hopper", presets), "");
        assert_eq!(did_you_mean("x", ["ppo"]), "");
    }
}
