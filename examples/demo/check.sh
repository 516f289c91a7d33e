#!/bin/sh
# A stand-in for untrusted code: it looks for secrets, tries the network and
# the rest of the disk, then does its real job (writing into the project).
# Run it under `sandbox run --profile strict` and compare with running it bare.
probe() {
    if eval "$2" >/dev/null 2>&1; then echo "  reachable: $1"; else echo "  blocked:   $1"; fi
}
echo "running as uid $(id -u) in $(pwd), pid $$"
echo "looking around:"
probe "/etc/shadow"                      "cat /etc/shadow"
probe "/root and \$HOME of the caller"   "ls /root"
probe "host processes"                   "test \$(ls /proc | grep -c '^[0-9]') -gt 5"
probe "network (1.1.1.1:53)"             "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=1)'"
probe "writing /usr/bin"                 "touch /usr/bin/planted"
probe "the project's .env"               "grep -q SECRET .env"
echo "doing the job:"
date -u +"built at %Y-%m-%dT%H:%M:%SZ" > output.txt && echo "  wrote $(pwd)/output.txt"
