#!/bin/sh
# A stand-in for untrusted code: it looks for secrets, tries the network and
# the rest of the disk, then does its real job (writing into the project).
# Run it under `sandbox run --profile strict` and compare with running it bare.
# Bare, it stays harmless: it only tests whether things can be opened (it
# reads and prints nothing from them), and the one file it writes outside the
# project is a canary next to it that it removes at once (with its hard link
# in the project, the proof that the host saw it).
probe() {
    if eval "$2" >/dev/null 2>&1; then echo "  reachable: $1"; else echo "  blocked:   $1"; fi
}
canary="$(cd .. && pwd)/.sandbox-demo-canary-$$"
witness="./.sandbox-demo-canary-$$"
# Writing next to the project counts only when the host saw it. A sandbox's
# private /tmp takes the write too (a project under /tmp has /tmp as its
# parent), so the canary must turn out to be on the project's own
# filesystem, the host's: hard-linkable into the project, or on its device.
escapes() {
    touch "$canary" 2>/dev/null || return 1
    if ln "$canary" "$witness" 2>/dev/null ||
        [ "$(stat -c %d "$canary")" = "$(stat -c %d .)" ]; then
        seen=yes
    else
        seen=no
    fi
    rm -f "$canary" "$witness"
    [ "$seen" = yes ]
}
echo "running as uid $(id -u) in $(pwd), pid $$"
echo "looking around:"
probe "/etc/shadow (opened, not read)"    "head -c 0 /etc/shadow"
probe "/root and \$HOME of the caller"    "ls /root"
probe "host processes"                    "test \$(ls /proc | grep -c '^[0-9]') -gt 5"
probe "network (1.1.1.1:53)"              "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=1).close()'"
probe "writing outside the project"       "escapes"
probe "the project's .env"                "grep -q SECRET .env"
echo "doing the job:"
date -u +"built at %Y-%m-%dT%H:%M:%SZ" > output.txt && echo "  wrote $(pwd)/output.txt"
