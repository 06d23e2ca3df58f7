#!/usr/bin/env python3
"""A SCRIPTED MODEL SERVER, NO LLM: a stand-in for an OpenAI-compatible Chat Completions API
(vLLM, Ollama, OpenAI...), so the built-in agent demo runs without an account or a GPU.

It plays the model for `ralph run --agent builtin`: each answer is decided from the
conversation it is sent, like `agent.sh` decides from the workspace. It asks to run the tests
(the `shell` tool), picks the first failing test, fixes it with `edit_file` (the fixes are
written below, in advance), runs the tests again and answers with the round's report: one fix
per round, so the loop takes a few rounds. Everything else is real: ralph's agent runs the tools
in the sandbox, the runner's gateway forwards the requests and counts the tokens, and ralph's
own `--verify` decides whether the job is complete.

Usage: scripted-model.py PORT_FILE   (listens on 127.0.0.1, an ephemeral port written to PORT_FILE)
"""
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The fixes this "model" knows: test name -> (old text, new text) in text.sh.
FIXES = {
    "slugify": ("-e 's/-$//'", "-e 's/-$//' | tr '[:upper:]' '[:lower:]'"),
    "word_count": ("tr -cd ' ' | wc -c | tr -d ' '", "wc -w | tr -d ' '"),
    "trim": ("sed -e 's/^ *//'", "sed -e 's/^ *//' -e 's/ *$//'"),
}


def report(status, summary, evidence, next_steps):
    return json.dumps({"status": status, "summary": summary, "evidence": evidence,
                       "nextSteps": next_steps, "blocker": ""})


def decide(messages):
    """The next assistant message: a tool call (name, arguments) or a final text."""
    calls = [c for m in messages if m.get("role") == "assistant"
             for c in (m.get("tool_calls") or [])]
    results = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
    if not calls:
        return ("shell", {"command": "sh test.sh"})
    last = calls[-1]["function"]["name"]
    if last == "edit_file":
        return ("shell", {"command": "sh test.sh"})
    out = results[-1] if results else ""
    failing = re.findall(r"^not ok - ([a-z_]+):", out, re.M)
    summary_line = re.findall(r"^\d+ passed, \d+ failed$", out, re.M)
    fixed = [json.loads(c["function"]["arguments"]).get("old") for c in calls
             if c["function"]["name"] == "edit_file"]
    if not failing:
        return "```json\n" + report("complete", "All tests pass.", summary_line, []) + "\n```"
    if fixed:
        return report("continue", "Fixed one test this round.", summary_line,
                      ["fix the failing test: " + t for t in failing])
    name = failing[0]
    if name not in FIXES:
        return report("blocked", "No known fix for " + name + ".", [], [])
    old, new = FIXES[name]
    return ("edit_file", {"path": "text.sh", "old": old, "new": new})


class Handler(BaseHTTPRequestHandler):
    n = 0

    def log_message(self, fmt, *args):  # quiet: ralph's own output is the demo
        pass

    def do_POST(self):
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        Handler.n += 1
        answer = decide(body.get("messages", []))
        if isinstance(answer, tuple):
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_%d" % Handler.n, "type": "function",
                "function": {"name": answer[0], "arguments": json.dumps(answer[1])}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": answer}
            finish = "stop"
        prompt = sum(len(json.dumps(m)) for m in body.get("messages", [])) // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": 20,
                 "total_tokens": prompt + 20}
        base = {"id": "chatcmpl-%d" % Handler.n, "created": 0, "model": body.get("model", "")}
        if body.get("stream"):
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(delta["tool_calls"][0], index=0)]
            chunks = [dict(base, object="chat.completion.chunk",
                           choices=[{"index": 0, "delta": delta, "finish_reason": finish}])]
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append(dict(base, object="chat.completion.chunk", choices=[], usage=usage))
            data = "".join("data: %s\n\n" % json.dumps(c) for c in chunks) + "data: [DONE]\n\n"
            ctype = "text/event-stream"
        else:
            data = json.dumps(dict(base, object="chat.completion", usage=usage, choices=[
                {"index": 0, "message": message, "finish_reason": finish}]))
            ctype = "application/json"
        raw = data.encode()
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
