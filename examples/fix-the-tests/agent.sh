#!/bin/sh
# ralph demo agent — SCRIPTED, NO LLM.
#
# A stand-in for a real coding agent, so the demo runs anywhere without an API key. It follows
# the round protocol honestly: it reads the handoff, inspects the workspace (runs the tests),
# fixes ONE failing helper per round with a fix it knows in advance, checks the result, and
# writes a report with evidence. It never looks at previous rounds except through the handoff
# file and the workspace.
set -eu

log() { echo "demo-agent: $*" >&2; }

if [ -f "$RALPH_HANDOFF_FILE" ]; then
    log "handoff from the previous round: $(cat "$RALPH_HANDOFF_FILE")"
else
    log "no handoff: this is the first round"
fi

json_list() { # lines on stdin -> JSON array of strings
    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/.*/"&"/' | paste -sd, - | sed -e 's/^/[/' -e 's/$/]/'
}

report() { # status summary evidence-lines next-step-lines
    printf '{"status":"%s","summary":"%s","evidence":%s,"nextSteps":%s,"blocker":""}\n' \
        "$1" "$2" "$(printf '%s' "$3" | json_list)" "$(printf '%s' "$4" | json_list)" > "$RALPH_REPORT_FILE"
    [ -n "$3" ] || sed -i 's/"evidence":\[""\]/"evidence":[]/' "$RALPH_REPORT_FILE"
    [ -n "$4" ] || sed -i 's/"nextSteps":\[""\]/"nextSteps":[]/' "$RALPH_REPORT_FILE"
}

before=$(sh test.sh 2>&1 || true)
failing=$(printf '%s\n' "$before" | sed -n 's/^not ok - \([a-z_]*\):.*/\1/p')
if [ -z "$failing" ]; then
    report complete "All tests already pass." "$(printf '%s\n' "$before" | tail -n 4)" ""
    exit 0
fi

target=$(printf '%s\n' "$failing" | head -n 1)
log "failing tests: $(printf '%s' "$failing" | tr '\n' ' '); fixing $target"
case "$target" in
    slugify)    sed -i "s/-e 's\/-\$\/\/'$/-e 's\/-\$\/\/' | tr '[:upper:]' '[:lower:]'/" text.sh; what="slugify now lowercases" ;;
    word_count) sed -i "s/tr -cd ' ' | wc -c/wc -w/" text.sh; what="word_count counts words, not spaces" ;;
    trim)       sed -i "s/-e 's\/^ \*\/\/'$/-e 's\/^ *\/\/' -e 's\/ *\$\/\/'/" text.sh; what="trim removes trailing spaces too" ;;
    *)          report blocked "No known fix for $target." "" ""; sed -i "s/\"blocker\":\"\"/\"blocker\":\"no scripted fix for $target\"/" "$RALPH_REPORT_FILE"; exit 0 ;;
esac

after=$(sh test.sh 2>&1 || true)
still=$(printf '%s\n' "$after" | sed -n 's/^not ok - \([a-z_]*\):.*/\1/p')
evidence=$(printf '%s\n' "$after" | grep -E "^(ok|not ok) - $target|passed, " || true)
if [ -z "$still" ]; then
    report complete "Fixed $target ($what); all tests pass." "$evidence" ""
else
    report continue "Fixed $target ($what)." "$evidence" "$(printf '%s\n' "$still" | sed 's/^/fix the failing test: /')"
fi
