#!/bin/sh
# The project's tests. Exits non-zero when any test fails.
. ./text.sh
passed=0
failed=0
check() {
    name=$1 expected=$2 actual=$3
    if [ "$expected" = "$actual" ]; then
        echo "ok - $name"
        passed=$((passed + 1))
    else
        echo "not ok - $name: expected '$expected', got '$actual'"
        failed=$((failed + 1))
    fi
}
check slugify "hello-world" "$(slugify 'Hello, World!')"
check word_count "4" "$(word_count 'one two three four')"
check trim "x y" "$(trim '  x y  ')"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
