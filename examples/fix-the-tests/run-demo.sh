#!/bin/sh
# Runs the demo end to end on a throwaway copy of project/ (the checkout stays clean):
# the scripted agent fixes the tests over a few rounds, and ralph's own `--verify` command
# (`sh test.sh`, which the agent may not edit) decides whether the job is complete.
# Extra arguments go to `ralph run` (e.g. --json).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ralph=${RALPH:-$here/../../target/x86_64-unknown-linux-gnu/release/ralph}
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-demo-XXXXXX")
cp -R "$here/project/." "$ws/"
echo "demo workspace: $ws" >&2
exec "$ralph" run \
    --objective-file "$here/OBJECTIVE.md" \
    --workspace "$ws" \
    --agent-cmd "$here/agent.sh" \
    --read "$here" \
    --protect test.sh \
    --verify "sh test.sh" \
    --max-rounds 6 \
    "$@"
