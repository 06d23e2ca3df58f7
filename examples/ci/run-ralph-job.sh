#!/bin/sh
# The CI step both examples run (GitHub Actions: github-actions.yml; GitLab CI: gitlab-ci.yml):
# one ralph job on a project whose tests fail, with everything a pipeline publishes written to
# OUT_DIR (default ./ralph-out):
#
#   result.json      the job's result object (`ralph run --json`): outcome, rounds, report, usage
#   junit.xml        a testcase per round attempt and per verify, for the CI's test view
#   summary.md       a Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set)
#   ralph.prom       the job's metrics, node-exporter textfile format
#
# The agent is the demo's scripted one (no LLM, no key): swap in `--agent codex` and a key held
# by the runner (see docs/agents.md) for a real one. The step's exit code is ralph's: 0 when the
# runner verified the job complete.
#
#   RALPH=/path/to/ralph  PROJECT=examples/fix-the-tests/project  examples/ci/run-ralph-job.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ralph=${RALPH:-ralph}
project=${PROJECT:-$here/../fix-the-tests/project}
out=${OUT_DIR:-$PWD/ralph-out}
mkdir -p "$out"
# A throwaway copy: the job edits it, the checkout stays as it was.
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-ci-XXXXXX")
cp -R "$project/." "$ws/"
status=0
"$ralph" run \
    --objective "Make the failing tests pass without editing test.sh." \
    --workspace "$ws" \
    --agent-cmd "$here/../fix-the-tests/agent.sh" \
    --read "$here/.." \
    --protect test.sh \
    --verify "sh test.sh" \
    --max-rounds 6 \
    --state-dir "$out/state" \
    --json \
    --junit "$out/junit.xml" \
    --summary "$out/summary.md" \
    --metrics-textfile "$out/ralph.prom" \
    > "$out/result.json" || status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
echo "ralph: exit $status; result, JUnit report, summary and metrics in $out" >&2
exit "$status"
