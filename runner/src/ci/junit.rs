//! The JUnit XML report of a job: one `<testsuite>` named after the job, a `<testcase>` per
//! set-up run (`set-up`, first), per round attempt (`round 2` or `round 2 (attempt 2)`) and per
//! verify run (`verify after round 3`). A failed attempt, set-up or verify has a `<failure>`
//! with its reason (a set-up's or verify's: how it ended and its output's last lines); a report, or a verify's output tail, is in `<system-out>`. The shape is the common subset Jenkins, GitLab, GitHub test reporters and
//! `junitparser` read.

use crate::job::JobResult;
use crate::store::{AttemptResult, Event};

use super::text::xml;

/// How much of a report or an output goes into the file per testcase.
const TEXT_CAP: usize = 16 * 1024;

/// The report of `result`, from its journal `events`.
pub fn render(result: &JobResult, events: &[Event]) -> String {
    let (attempts, verifies) = super::steps(events);
    let mut cases = String::new();
    let mut failures = 0usize;
    let mut tests = 0usize;
    // The set-up runs before round 1.
    for setup in super::setups(events) {
        tests += 1;
        failures += usize::from(!setup.passed);
        cases.push_str(&step_case(&setup, "ralph.setup", "set-up", "setup_failed"));
    }
    // Attempts and verifies in journal order: a verify follows the round it checked.
    let mut v = verifies.iter().peekable();
    for a in &attempts {
        while let Some(ver) = v.next_if(|ver| ver.round < a.round) {
            tests += 1;
            failures += usize::from(!ver.passed);
            cases.push_str(&verify_case(ver));
        }
        tests += 1;
        let name = if a.attempt > 1 {
            format!("round {} (attempt {})", a.round, a.attempt)
        } else {
            format!("round {}", a.round)
        };
        let (what, failed) = super::describe(&a.result);
        let time = secs(a.duration_ms);
        cases.push_str(&format!(
            "    <testcase classname=\"ralph.rounds\" name=\"{}\" time=\"{time}\">\n",
            xml(&name)
        ));
        if failed {
            failures += 1;
            let kind = match &a.result {
                AttemptResult::Failed { reason, .. } => reason.as_str().to_owned(),
                AttemptResult::SandboxFailed { .. } => "sandbox_unavailable".to_owned(),
                other => serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
                    .unwrap_or_else(|| "failed".to_owned()),
            };
            let message = bounded(&what);
            cases.push_str(&format!(
                "      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
                xml(&kind),
                xml(&message),
                xml(&message)
            ));
        }
        if let AttemptResult::Reported { report } = &a.result {
            cases.push_str(&format!(
                "      <system-out>{}</system-out>\n",
                xml(&bounded(&crate::util::terminal::json(report, false)))
            ));
        }
        cases.push_str("    </testcase>\n");
    }
    for ver in v {
        tests += 1;
        failures += usize::from(!ver.passed);
        cases.push_str(&verify_case(ver));
    }
    let name = format!("ralph job {}", result.job_id);
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites name=\"ralph\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{time}\">\n  \
         <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time}\">\n    \
         <properties>\n      \
         <property name=\"outcome\" value=\"{outcome}\"/>\n      \
         <property name=\"reason\" value=\"{reason}\"/>\n      \
         <property name=\"rounds\" value=\"{rounds}\"/>\n      \
         <property name=\"message\" value=\"{message}\"/>\n    \
         </properties>\n{cases}  </testsuite>\n</testsuites>\n",
        time = secs(result.duration_ms),
        name = xml(&name),
        outcome = result.outcome.as_str(),
        reason = result.reason.as_str(),
        rounds = result.rounds,
        message = xml(&bounded(&result.message)),
    )
}

fn verify_case(v: &super::Verify) -> String {
    let name = format!("verify after round {}", v.round);
    step_case(v, "ralph.verify", &name, "verify_failed")
}

/// The testcase of a runner step (verify, set-up): `kind` is its failure's type.
fn step_case(v: &super::Verify, classname: &str, name: &str, kind: &str) -> String {
    let mut s = format!(
        "    <testcase classname=\"{classname}\" name=\"{}\" time=\"{}\">\n",
        xml(name),
        secs(v.duration_ms)
    );
    if !v.passed {
        // The message: the verdict and the output's last line (what a test runner ends with:
        // `1 failed, 3 passed`); the body: its last lines; system-out: the whole kept tail.
        let (tail, _) = super::last_lines(&v.output_tail, super::VERIFY_TAIL_LINES);
        let last = tail
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let mut message = format!("`{}` failed: {}", v.command, v.how());
        if !last.is_empty() {
            message.push_str(": ");
            message.push_str(last);
        }
        s.push_str(&format!(
            "      <failure type=\"{kind}\" message=\"{}\">{}</failure>\n",
            xml(&bounded(&message)),
            xml(&bounded(tail))
        ));
    }
    if !v.output_tail.is_empty() {
        s.push_str(&format!(
            "      <system-out>{}</system-out>\n",
            xml(&bounded(&v.output_tail))
        ));
    }
    s.push_str("    </testcase>\n");
    s
}

fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn bounded(s: &str) -> String {
    crate::util::text::bounded(s, TEXT_CAP)
}
