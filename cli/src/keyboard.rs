//! `fleetrl record --keyboard ENV`: a person plays a discrete native env from the terminal,
//! one line per step (an action index; Enter repeats the last action; `q` ends the episode
//! there, recorded as cut short).

use std::io::{BufRead, Write};

use fleetrl_core::envs;
use fleetrl_proto::space::{Action, Space};
use fleetrl_runtime::demo::{Demo, DemoSource, Recorder};

/// One episode of `env_id` from `seed`, actions read from `input`, prompts written to `prompt`.
pub(crate) fn play(
    env_id: &str,
    seed: u64,
    input: &mut impl BufRead,
    prompt: &mut impl Write,
) -> anyhow::Result<Demo> {
    let mut env = envs::make(env_id)?;
    let Space::Discrete { n } = env.action_space() else {
        anyhow::bail!("keyboard play needs a discrete action space; {env_id} has a box");
    };
    let mut obs = env.reset(Some(seed));
    let mut rec = Recorder::new(
        env_id,
        DemoSource::Human,
        vec![obs.len()],
        &env.action_space(),
        &obs,
    );
    let mut last: Option<i64> = None;
    loop {
        write!(
            prompt,
            "step {} obs {obs:?} action 0..{} (Enter: repeat, q: stop)> ",
            rec.len(),
            n - 1
        )?;
        prompt.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 || line.trim() == "q" {
            return Ok(rec.finish(false));
        }
        let action = match (line.trim(), last) {
            ("", Some(a)) => a,
            (text, _) => match text.parse::<i64>() {
                Ok(a) if (0..n).contains(&a) => a,
                _ => {
                    writeln!(prompt, "`{text}` is not an action in 0..{}", n - 1)?;
                    continue;
                }
            },
        };
        last = Some(action);
        let step = env.step(&Action::Discrete(action))?;
        rec.push(&Action::Discrete(action), step.reward, &step.obs, None);
        obs = step.obs;
        if step.terminated || step.truncated {
            let demo = rec.finish(step.terminated);
            writeln!(prompt, "episode over: return {}", demo.total_reward())?;
            return Ok(demo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_actions_and_q_ends_the_episode() {
        let mut out = Vec::new();
        let mut input = std::io::Cursor::new("x\n7\n2\n\n0\nq\n");
        let demo = play("SparseMountainCar-v0", 1, &mut input, &mut out).unwrap();
        let fleetrl_runtime::demo::DemoActions::Discrete { actions, .. } = &demo.actions else {
            panic!("discrete");
        };
        assert_eq!(actions, &vec![2, 2, 0]);
        assert!(!demo.terminated);
        assert_eq!(demo.source, DemoSource::Human);
        let shown = String::from_utf8(out).unwrap();
        assert!(shown.contains("`x` is not an action") && shown.contains("`7` is not"));
        let err = play(
            "Pendulum-v1",
            0,
            &mut std::io::Cursor::new(""),
            &mut Vec::new(),
        );
        assert!(err.unwrap_err().to_string().contains("discrete"));
    }
}
