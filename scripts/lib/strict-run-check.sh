#!/bin/sh
# scripts/test-deb and scripts/test-action: a strict run from the current
# directory (the project) as the current user. It must write out.txt there,
# and must not read /etc/shadow nor $HOME/secret.txt (outside the project).
# The verdict line tells the command's own answer from the sandbox failing
# to start (status 125). $1 names the user in messages.
set -eu
who=${1:-$(id -un)}
rm -f out.txt
verdict=$(sandbox run --profile strict -- sh -c '
    echo hi > out.txt
    for secret in /etc/shadow "$HOME/secret.txt"; do
        if cat "$secret" >/dev/null 2>&1; then echo "READABLE $secret"; exit 1; fi
    done
    echo contained') || {
    echo "strict run as $who failed (status $?): ${verdict:-no output}" >&2
    exit 1
}
[ "$verdict" = contained ] || {
    echo "strict run as $who said: $verdict" >&2
    exit 1
}
[ "$(cat out.txt)" = hi ] || {
    echo "strict run as $who: out.txt does not hold what the run wrote" >&2
    exit 1
}
echo "strict run as $who: wrote out.txt, could not read /etc/shadow nor $HOME/secret.txt" >&2
# An allowlist run: its proxy is a program of its own (sandbox-net,
# installed beside the faces), which the run does not start without.
sandbox run --profile strict --net allow:example.invalid -- sh -c 'test -n "$HTTPS_PROXY"' || {
    echo "an allowlist run as $who failed (status $?): is sandbox-net installed?" >&2
    exit 1
}
echo "allowlist run as $who: started its net process" >&2
