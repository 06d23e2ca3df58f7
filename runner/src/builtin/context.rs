//! Keeps the conversation within a context budget. The system message, the brief (the first
//! user message) and every assistant message are kept whole; when the conversation is over the
//! budget, the oldest tool results are replaced by a one-line note saying how much was trimmed
//! (the model can run the tool again), oldest first, never the results of the latest step.

use super::wire::Message;

/// Trims `messages` in place to `budget` characters if it can; returns how many tool results
/// were trimmed.
pub fn trim(messages: &mut [Message], budget: usize) -> usize {
    let mut total: usize = messages.iter().map(Message::size).sum();
    if total <= budget {
        return 0;
    }
    // The latest step's results: the tool messages after the last assistant message.
    let last_assistant = messages
        .iter()
        .rposition(|m| m.role == "assistant")
        .unwrap_or(0);
    let mut trimmed = 0;
    for m in messages.iter_mut().take(last_assistant) {
        if total <= budget {
            break;
        }
        if m.role != "tool" {
            continue;
        }
        let Some(content) = &m.content else { continue };
        if content.starts_with(TRIMMED) {
            continue;
        }
        let note = format!(
            "{TRIMMED} {} bytes of an earlier tool result]",
            content.len()
        );
        total = total - content.len() + note.len();
        m.content = Some(note);
        trimmed += 1;
    }
    trimmed
}

/// How a trimmed result starts.
const TRIMMED: &str = "[trimmed to save context:";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_tool_results_go_first_and_the_latest_step_stays() {
        let big = "x".repeat(1000);
        let mut m = vec![
            Message::text("system", "sys"),
            Message::text("user", "brief"),
            Message::text("assistant", "a1"),
            Message::tool("1", big.clone()),
            Message::text("assistant", "a2"),
            Message::tool("2", big.clone()),
            Message::text("assistant", "a3"),
            Message::tool("3", big.clone()),
        ];
        assert_eq!(trim(&mut m, 100_000), 0);
        assert_eq!(trim(&mut m, 1500), 2);
        assert!(m[3].content.as_deref().unwrap().starts_with(TRIMMED));
        assert!(m[5].content.as_deref().unwrap().starts_with(TRIMMED));
        assert_eq!(m[7].content.as_deref(), Some(big.as_str()));
        assert_eq!(m[1].content.as_deref(), Some("brief"));
        // Over budget with nothing left to trim: left as it is.
        assert_eq!(trim(&mut m, 10), 0);
    }
}
