#!/bin/sh
# The demo with ralph's BUILT-IN AGENT against a SCRIPTED MODEL SERVER (no LLM, no account):
# scripted-model.py plays an OpenAI-compatible Chat Completions API on loopback; the built-in
# agent (`--agent builtin`) talks to it through the runner's model gateway, runs the tools in
# the sandbox and reports; ralph's own `--verify` decides. Swap the upstream for a real one:
#   --upstream https://api.openai.com/v1 --api-key-env OPENAI_API_KEY --model gpt-4.1
#   --upstream http://127.0.0.1:11434/v1 --model qwen2.5-coder:7b        (a local Ollama)
# Extra arguments go to `ralph run` (e.g. --json, --follow).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ralph=${RALPH:-$here/../../target/x86_64-unknown-linux-gnu/release/ralph}
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-demo-XXXXXX")
cp -R "$here/project/." "$ws/"
echo "demo workspace: $ws" >&2
portfile=$(mktemp -u "${TMPDIR:-/tmp}/ralph-model-port-XXXXXX")
python3 "$here/scripted-model.py" "$portfile" &
model=$!
trap 'kill $model 2>/dev/null || true; rm -f "$portfile"' EXIT INT TERM
i=0
while [ ! -s "$portfile" ]; do
    i=$((i + 1))
    if [ "$i" -gt 200 ] || ! kill -0 "$model" 2>/dev/null; then
        echo "the scripted model server did not start" >&2
        exit 1
    fi
    sleep 0.05
done
echo "scripted model server (no LLM): http://127.0.0.1:$(cat "$portfile")/v1" >&2
"$ralph" run \
    --objective-file "$here/OBJECTIVE.md" \
    --workspace "$ws" \
    --agent builtin \
    --upstream "http://127.0.0.1:$(cat "$portfile")/v1" \
    --model scripted-demo-model \
    --protect test.sh \
    --verify "sh test.sh" \
    --max-rounds 6 \
    "$@"
