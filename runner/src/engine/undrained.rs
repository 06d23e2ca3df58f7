//! Output that was not fully read is said, never silently empty: a capture whose reader did not
//! finish draining after the process ended gets a marker at its end, and the attempt's (or
//! verify's) message names the streams. So is output read but not kept because its log could
//! not be written (a full disk): the capture's own marker is in the file, and [`dropped`]
//! gives the sentence.

use std::io::Write;
use std::path::Path;

use ralph_sandbox::capture::UNDRAINED_MARKER;
use ralph_sandbox::outcome::CaptureSummary;

/// Appends [`UNDRAINED_MARKER`] to the capture file of each undrained stream (`name`, its
/// summary, its file) and returns the sentence for the message, or `None` when every stream
/// drained.
pub(super) fn mark(streams: &[(&str, &CaptureSummary, &Path)]) -> Option<String> {
    let names: Vec<&str> = streams
        .iter()
        .filter(|(_, summary, _)| summary.undrained)
        .map(|(name, _, path)| {
            // Best effort: the note in the message stands even if the file cannot take it.
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
            {
                let _ = f.write_all(UNDRAINED_MARKER.as_bytes());
            }
            *name
        })
        .collect();
    (!names.is_empty()).then(|| {
        format!(
            "the {} reader did not finish within 5 s after the process ended: the capture may be incomplete",
            names.join(" and ")
        )
    })
}

/// The sentence for a message naming each stream whose log stopped taking output (its summary
/// says where and why), and whether any stopped for lack of room; `(None, false)` when every
/// log took all it was given.
pub(super) fn dropped(streams: &[(&str, &CaptureSummary)]) -> (Option<String>, bool) {
    let mut no_space = false;
    let notes: Vec<String> = streams
        .iter()
        .filter_map(|(name, summary)| {
            let d = summary.dropped.as_ref()?;
            no_space |= d.no_space;
            Some(format!(
                "the {name} log could not be written after {} bytes ({}): the rest was read and discarded",
                d.after, d.error
            ))
        })
        .collect();
    ((!notes.is_empty()).then(|| notes.join("; ")), no_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undrained_capture_is_marked_and_named_a_drained_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("stdout.log");
        let err = dir.path().join("stderr.log");
        std::fs::write(&out, "partial").unwrap();
        std::fs::write(&err, "all of it\n").unwrap();
        let undrained = CaptureSummary {
            undrained: true,
            ..CaptureSummary::default()
        };
        let drained = CaptureSummary::default();
        let note = mark(&[("stdout", &undrained, &out), ("stderr", &drained, &err)]).unwrap();
        assert!(
            note.contains("stdout reader") && !note.contains("stderr"),
            "{note}"
        );
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!("partial{UNDRAINED_MARKER}")
        );
        assert_eq!(std::fs::read_to_string(&err).unwrap(), "all of it\n");
        assert_eq!(mark(&[("stdout", &drained, &out)]), None);
    }

    #[test]
    fn a_dropped_log_is_named_with_where_and_why() {
        use ralph_sandbox::outcome::CaptureDrop;
        let full = CaptureSummary {
            dropped: Some(CaptureDrop {
                after: 4096,
                no_space: true,
                error: "No space left on device (os error 28)".into(),
            }),
            ..CaptureSummary::default()
        };
        let fine = CaptureSummary::default();
        let (note, no_space) = dropped(&[("stdout", &full), ("stderr", &fine)]);
        let note = note.unwrap();
        assert!(no_space);
        assert!(
            note.contains("stdout log") && note.contains("after 4096 bytes"),
            "{note}"
        );
        assert!(
            note.contains("No space left") && !note.contains("stderr"),
            "{note}"
        );
        assert_eq!(dropped(&[("stdout", &fine)]), (None, false));
    }
}
