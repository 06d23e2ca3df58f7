# Small text helpers. Source this file: . ./text.sh

# slugify TEXT: lowercase words joined by single dashes, e.g. "Hello, World!" -> "hello-world".
slugify() {
    printf '%s' "$1" | sed -e 's/[^A-Za-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//'
}

# word_count TEXT: number of whitespace-separated words.
word_count() {
    printf '%s' "$1" | tr -cd ' ' | wc -c | tr -d ' '
}

# trim TEXT: TEXT without leading or trailing spaces.
trim() {
    printf '%s' "$1" | sed -e 's/^ *//'
}
