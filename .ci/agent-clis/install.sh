#!/usr/bin/env bash
# Installs the agent CLIs pinned by package-lock.json (next to this script) into
# <clone>/target/agent-clis with `npm ci`; npm's cache (and log) is kept under that directory and
# removed after, so nothing is cached outside the clone. Idempotent: does nothing when the tree
# was installed from this very lock file and the CLIs' binaries are there. Run by .ci/setup (as
# any user).
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
dest=$(cd "$src/../.." && pwd)/target/agent-clis
codex=$dest/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
claude=$dest/node_modules/@anthropic-ai/claude-code-linux-x64/claude
stamp=$dest/installed-lock.json

if cmp -s "$src/package-lock.json" "$stamp" && [ -x "$codex" ] && [ -x "$claude" ]; then
    echo "setup: agent CLIs already installed in $dest"
    exit 0
fi
echo "setup: installing the agent CLIs into $dest"
mkdir -p "$dest"
rm -f "$stamp"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# claude-code's postinstall copies its native binary over bin/claude.exe; the engines warning
# (it asks for node >= 22) is harmless since that binary does not run on node.
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error --cache "$dest/.npm-cache")
"$codex" --version
"$claude" --version
rm -rf "$dest/.npm-cache"
cp "$src/package-lock.json" "$stamp"
