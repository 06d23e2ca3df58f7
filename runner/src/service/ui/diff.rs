//! A patch's lines for the job page: each line made safe ([`super::text`]) and classed by
//! its first characters (a file header, a hunk, an addition, a removal, context), so the style
//! sheet colours them. The classes are fixed names; nothing of the line becomes markup.

use super::text;

/// The most lines of a patch shown in the page (the download has them all).
pub const MAX_LINES: usize = 5_000;

/// What a line of a patch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `diff --git`, `---`, `+++`, `index`, mode and rename lines.
    File,
    /// `@@ … @@`.
    Hunk,
    /// `+…`.
    Add,
    /// `-…`.
    Del,
    /// Context and anything else.
    Context,
}

impl Kind {
    /// Its CSS class.
    pub fn class(self) -> &'static str {
        match self {
            Kind::File => "diff-file",
            Kind::Hunk => "diff-hunk",
            Kind::Add => "diff-add",
            Kind::Del => "diff-del",
            Kind::Context => "diff-ctx",
        }
    }
}

/// One shown line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Its class.
    pub class: &'static str,
    /// Its text, safe to show (no control character).
    pub text: String,
}

/// The lines of `patch` (at most [`MAX_LINES`]) and how many more there are.
pub fn lines(patch: &[u8]) -> (Vec<Line>, usize) {
    let text = String::from_utf8_lossy(patch);
    let mut out = Vec::new();
    let mut more = 0usize;
    let mut in_hunk = false;
    for l in text.lines() {
        if out.len() >= MAX_LINES {
            more += 1;
            continue;
        }
        let kind = if l.starts_with("diff --git ") {
            in_hunk = false;
            Kind::File
        } else if l.starts_with("@@") {
            in_hunk = true;
            Kind::Hunk
        } else if !in_hunk
            && (l.starts_with("--- ")
                || l.starts_with("+++ ")
                || l.starts_with("index ")
                || l.starts_with("new file")
                || l.starts_with("deleted file")
                || l.starts_with("old mode")
                || l.starts_with("new mode")
                || l.starts_with("rename ")
                || l.starts_with("similarity ")
                || l.starts_with("Binary files"))
        {
            Kind::File
        } else if l.starts_with('+') {
            Kind::Add
        } else if l.starts_with('-') {
            Kind::Del
        } else {
            Kind::Context
        };
        out.push(Line {
            class: kind.class(),
            text: text::line(l),
        });
    }
    (out, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classed_and_escaped() {
        let patch = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new \x1b]8;;javascript:x\x1b\\\n--- not a header\n ctx\n";
        let (lines, more) = lines(patch);
        assert_eq!(more, 0);
        let classes: Vec<&str> = lines.iter().map(|l| l.class).collect();
        assert_eq!(
            classes,
            [
                "diff-file",
                "diff-file",
                "diff-file",
                "diff-hunk",
                "diff-del",
                "diff-add",
                "diff-del",
                "diff-ctx"
            ]
        );
        assert_eq!(lines[5].text, "+new \\x1b]8;;javascript:x\\x1b\\");
    }

    #[test]
    fn a_long_patch_is_cut() {
        let patch = "+x\n".repeat(MAX_LINES + 7);
        let (lines, more) = lines(patch.as_bytes());
        assert_eq!(lines.len(), MAX_LINES);
        assert_eq!(more, 7);
    }
}
