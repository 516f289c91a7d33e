#!/bin/sh
# One invocation after another until the supervisor closes the channel.
set -eu
while path=$(sandbox ipc --invocation --param path); do
    text=$(sandbox ipc fs.read "{\"path\": \"$path\"}" --raw | tr '[:lower:]' '[:upper:]')
    lines=$(printf '%s\n' "$text" | wc -l)
    # JSON-encode the text with the tools at hand: escape \ and ", join lines with \n.
    escaped=$(printf '%s' "$text" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | awk 'NR>1{printf "\\n"} {printf "%s", $0}')
    sandbox ipc --result "{\"path\": \"$path\", \"lines\": $lines, \"text\": \"$escaped\"}"
done
