#!/bin/sh
# The CI step both examples run (GitHub Actions: github-actions.yml; GitLab CI: gitlab-ci.yml):
# one ralph job on a copy of a project, with everything a pipeline publishes written to OUT_DIR.
# The checkout itself is never touched: the job works on a throwaway copy, and what it changed
# comes back as result.patch (apply it with `git apply`, or push it in a later step).
#
# Settings (environment variables; lists are separated by spaces or newlines):
#
#   PROJECT       the project directory (default: examples/fix-the-tests/project, the demo)
#   OBJECTIVE     what the agent is to do (or OBJECTIVE_FILE: a file holding it)
#   AGENT         an agent preset: codex, claude, builtin (see docs/agents.md), or
#   AGENT_CMD     an agent command of your own
#   SETUP         a set-up command run once before round 1 (`ralph run --setup`; e.g. installs
#                 the dependencies through ALLOW_HOSTS); passed only when set
#   VERIFY        the command whose exit status decides "complete" (e.g. `pytest -q`)
#   PROTECT       paths the agent may not change (e.g. `tests pyproject.toml`)
#   CACHES        directories kept across jobs (`--cache`, e.g. `~/.cache/pip`)
#   ALLOW_HOSTS   hosts the rounds may reach through the egress proxy (`--allow-host`, e.g. your
#                 package index's, or a mirror on this host: `127.0.0.1:3141`)
#   READ          more directories the rounds may read (`--read`)
#   MAX_ROUNDS    the round budget (default 6)
#   RALPH_ARGS    further `ralph run` flags, split on spaces (`--model gpt-5 --max-tokens 2000000`)
#   RALPH         the ralph binary (default: ralph on PATH)
#   OUT_DIR       where the results go (default: ./ralph-out)
#   STATE_DIR     ralph's state directory (default: OUT_DIR/state: the rounds' logs are there)
#
# Without PROJECT the demo runs: its scripted agent (no LLM, no key), `sh test.sh` as verify,
# test.sh protected. With PROJECT, AGENT or AGENT_CMD is required and nothing of the demo is used.
#
# OUT_DIR holds afterwards:
#
#   result.json      the job's result object (`ralph run --json`): outcome, rounds, report, usage
#   result.patch     what the job changed, against the project as the step found it
#                    (`git diff --binary`: applies with `git apply` in the checkout; empty when
#                    nothing changed)
#   junit.xml        a testcase per round attempt and per verify, for the CI's test view
#   summary.md       a Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set)
#   ralph.prom       the job's metrics, node-exporter textfile format (adds up across runs)
#
# The step's exit code is ralph's (docs/operations.md): 0 when the runner verified the job
# complete (or the worker reported it complete without a VERIFY). Its temporary directory
# (TMPDIR/ralph-ci-*: the copy the job worked on) is removed however the step ends; a SIGINT or
# SIGTERM to the step cancels the job first (ralph gets SIGTERM and ends it as cancelled).
#
#   RALPH=/path/to/ralph PROJECT=. AGENT=codex VERIFY='pytest -q' examples/ci/run-ralph-job.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ralph=${RALPH:-ralph}
out=${OUT_DIR:-$PWD/ralph-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
state=${STATE_DIR:-$out/state}

fail() {
    echo "run-ralph-job.sh: $*" >&2
    exit 64
}

if [ -z "${PROJECT:-}" ]; then
    # The demo: its project, its scripted agent, its verify and its protected file.
    PROJECT=$here/../fix-the-tests/project
    : "${OBJECTIVE:=Make the failing tests pass without editing test.sh.}"
    : "${AGENT_CMD:=$here/../fix-the-tests/agent.sh}"
    : "${VERIFY:=sh test.sh}"
    : "${PROTECT:=test.sh}"
    READ="${READ:-} $here/.."
fi
[ -d "$PROJECT" ] || fail "PROJECT \`$PROJECT\` is not a directory"
project=$(cd "$PROJECT" && pwd)
if [ -n "${AGENT:-}" ] && [ -n "${AGENT_CMD:-}" ]; then
    fail "set AGENT (a preset) or AGENT_CMD (a command), not both"
fi
if [ -z "${AGENT:-}" ] && [ -z "${AGENT_CMD:-}" ]; then
    fail "set AGENT (codex, claude, builtin) or AGENT_CMD (a command)"
fi
if [ -z "${OBJECTIVE:-}" ] && [ -z "${OBJECTIVE_FILE:-}" ]; then
    fail "set OBJECTIVE (or OBJECTIVE_FILE)"
fi

# One temporary directory for everything the step makes, removed however it ends.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ralph-ci-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ws=$tmp/workspace
mkdir "$ws"
cp -R "$project/." "$ws/"

# OUT_DIR (and the state directory) may lie inside the project (GitLab keeps artifacts only
# there): never part of the job's copy, nor of its patch.
exclude=
for d in "$out" "$state"; do
    case "$d/" in
        "$project"/*)
            rel=${d#"$project"/}
            [ -n "$rel" ] || fail "OUT_DIR and STATE_DIR may not be the project itself"
            rm -rf "${ws:?}/$rel"
            exclude="$exclude :(exclude)$rel"
            ;;
    esac
done

# The project as the step found it, recorded before the job (a throwaway repository outside the
# workspace, so nothing the agent leaves in its .git counts; git's own configuration, hooks and
# drivers off): what result.patch is taken against.
g() {
    GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_DIR="$tmp/patch/.git" \
        git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.autocrlf=false \
        -c core.symlinks=true -c diff.external= "$@"
}
GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git init -q "$tmp/patch"
# shellcheck disable=SC2086 # the exclusions are separate pathspecs
GIT_INDEX_FILE=$tmp/base.index g --work-tree="$project" add -A -- . $exclude
base=$(GIT_INDEX_FILE=$tmp/base.index g write-tree)

# The command line, built as positional parameters (no word of a setting is split again).
set -- run --workspace "$ws" --state-dir "$state" --json \
    --junit "$out/junit.xml" --summary "$out/summary.md" --metrics-textfile "$out/ralph.prom" \
    --max-rounds "${MAX_ROUNDS:-6}"
if [ -n "${OBJECTIVE_FILE:-}" ]; then
    set -- "$@" --objective-file "$OBJECTIVE_FILE"
else
    set -- "$@" --objective "$OBJECTIVE"
fi
if [ -n "${AGENT:-}" ]; then
    set -- "$@" --agent "$AGENT"
else
    set -- "$@" --agent-cmd "$AGENT_CMD"
fi
[ -z "${SETUP:-}" ] || set -- "$@" --setup "$SETUP"
[ -z "${VERIFY:-}" ] || set -- "$@" --verify "$VERIFY"
nl='
'
old_ifs=$IFS
IFS=" $nl"
set -f
for p in ${PROTECT:-}; do set -- "$@" --protect "$p"; done
for c in ${CACHES:-}; do set -- "$@" --cache "$c"; done
for h in ${ALLOW_HOSTS:-}; do set -- "$@" --allow-host "$h"; done
for r in ${READ:-}; do set -- "$@" --read "$r"; done
# shellcheck disable=SC2086 # RALPH_ARGS is split on purpose
set -- "$@" ${RALPH_ARGS:-}
IFS=$old_ifs
set +f

# Files of an earlier run in OUT_DIR are not mixed into this one's (ralph appends a summary).
rm -f "$out/result.json" "$out/result.patch" "$out/junit.xml" "$out/summary.md"
# ralph runs in the background so that a signal to this step (a cancelled pipeline) reaches it:
# it is passed on as SIGTERM (ralph cancels the job: the round's tree is stopped, the result
# written), and the step waits for ralph before it cleans up.
"$ralph" "$@" > "$out/result.json" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || :' INT TERM
status=0
wait "$pid" || status=$?
# A wait cut short by a signal: wait again for ralph's own exit status.
while kill -0 "$pid" 2>/dev/null; do
    status=0
    wait "$pid" || status=$?
done
trap 'exit 130' INT
trap 'exit 143' TERM

# What the job changed, against the project as it was. The workspace's ignore rules apply (a
# change to .gitignore shows in the patch).
if [ -d "$ws" ]; then
    # shellcheck disable=SC2086
    GIT_INDEX_FILE=$tmp/ws.index g --work-tree="$ws" add -A -- . $exclude
    GIT_INDEX_FILE=$tmp/ws.index g diff --cached --binary --no-ext-diff --no-textconv \
        "$base" > "$out/result.patch"
    files=$(GIT_INDEX_FILE=$tmp/ws.index g diff --cached --name-only "$base" | wc -l)
    echo "ralph: result.patch: $((files)) file(s) changed" >&2
fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/summary.md" ]; then
    cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
echo "ralph: exit $status; result, patch, JUnit report, summary and metrics in $out" >&2
exit "$status"
