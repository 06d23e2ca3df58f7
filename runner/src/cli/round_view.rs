//! How `ralph logs JOB --round K` prints a round's captured output: by default each line behind
//! the round's label (`[round 3] `, `[round 3 stderr] `, `[round 3 attempt 2] `,
//! `[round 3 verify] `; the set-up's `[setup] `) and escaped ([`terminal::Prefixed`]): no line of the agent starts a line,
//! no escape sequence reaches the terminal or the CI log. `--raw` prints the bytes as captured,
//! for a file or a program (unsafe on a terminal or in a CI log).

use ralph_runner::util::terminal::Prefixed;

/// Where a round's log goes.
#[derive(Debug)]
pub enum RoundView {
    /// The captured bytes as they are (`--raw`).
    Raw,
    /// Lines behind the round's label, escaped.
    Shown(Prefixed),
}

/// The label of a round's stream: `round 3`, `round 3 attempt 2`, then ` stderr` or ` verify`;
/// the set-up's is `setup` (as `ralph run --follow` prints it).
pub fn label(round: u32, attempt: u32, stream: &str) -> String {
    if stream == "setup" {
        return "[setup]".to_owned();
    }
    let mut l = format!("[round {round}");
    if attempt > 1 && stream != "verify" {
        l.push_str(&format!(" attempt {attempt}"));
    }
    if stream != "stdout" {
        l.push(' ');
        l.push_str(stream);
    }
    l.push(']');
    l
}

impl RoundView {
    /// The view `raw` asks for, of that round's `stream`.
    pub fn new(raw: bool, round: u32, attempt: u32, stream: &str) -> Self {
        if raw {
            RoundView::Raw
        } else {
            RoundView::Shown(Prefixed::new(&label(round, attempt, stream)))
        }
    }

    /// Prints `chunk` (the lines it completes, when shown).
    pub fn push(&mut self, chunk: &[u8]) {
        match self {
            RoundView::Raw => super::stdout::write_bytes(chunk),
            RoundView::Shown(p) => {
                let mut text = String::new();
                p.push(chunk, |l| {
                    text.push_str(&l);
                    text.push('\n');
                });
                if !text.is_empty() {
                    super::stdout::write(&text);
                }
            }
        }
    }

    /// Prints what is left (an unterminated last line).
    pub fn finish(&mut self) {
        if let RoundView::Shown(p) = self {
            p.finish(|l| super::stdout::write(&format!("{l}\n")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_round_the_attempt_and_the_stream() {
        assert_eq!(label(3, 1, "stdout"), "[round 3]");
        assert_eq!(label(3, 2, "stderr"), "[round 3 attempt 2 stderr]");
        assert_eq!(label(1, 2, "verify"), "[round 1 verify]");
        assert_eq!(label(0, 1, "setup"), "[setup]");
    }
}
