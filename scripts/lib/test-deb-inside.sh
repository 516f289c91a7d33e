#!/bin/sh
# Run by scripts/test-deb as / of a fresh Debian root: install, use, purge.
# Each step says what it checks; the first failure stops the script.
set -eu

step=start
trap 'status=$?; [ $status = 0 ] || echo "test-deb: FAILED at step: $step (status $status)" >&2' EXIT
step() {
    step=$1
    echo "-- $step ($(date +%s))" >&2
}
fail() {
    echo "test-deb: $*" >&2
    exit 1
}

step "install the .deb with apt"
apt-get install -y --no-install-recommends /tmp/sandbox.deb
dpkg-query -W -f '${Status} ${Version}\n' sandbox

step "the package's files are in place"
dpkg -L sandbox >/tmp/sandbox.files
for path in /usr/bin/sandbox /etc/apparmor.d/sandbox \
    /usr/libexec/sandbox/sandbox-daemon /usr/libexec/sandbox/sandbox-mcp \
    /usr/libexec/sandbox/sandbox-oci /usr/libexec/sandbox/sandbox-net \
    /usr/lib/systemd/system/sandbox.service /usr/lib/systemd/system/sandbox.socket \
    /usr/share/man/man1/sandbox.1.gz /usr/share/man/man1/sandbox-run.1.gz \
    /usr/share/bash-completion/completions/sandbox \
    /usr/share/zsh/vendor-completions/_sandbox \
    /usr/share/fish/vendor_completions.d/sandbox.fish; do
    [ -f "$path" ] || fail "$path is missing"
    grep -qx "$path" /tmp/sandbox.files || fail "$path is not listed by dpkg -L sandbox"
done
[ "$(readlink /usr/bin/sandbox-runc)" = ../libexec/sandbox/sandbox-oci ] ||
  fail "/usr/bin/sandbox-runc is not a link to ../libexec/sandbox/sandbox-oci"
getent group sandbox >/dev/null || fail "postinst did not create the group sandbox"
# The profile must name the installed binaries (AppArmor attaches by path):
# sandbox and the faces in /usr/libexec/sandbox.
grep -qF 'profile sandbox /usr/{,local/}{bin,libexec/sandbox}/sandbox{,-daemon,-mcp,-oci} ' /etc/apparmor.d/sandbox ||
    fail "the AppArmor profile does not attach to /usr/bin/sandbox and /usr/libexec/sandbox/sandbox-*"
grep -qx 'ExecStart=sandbox daemon' /usr/lib/systemd/system/sandbox.service ||
    fail "sandbox.service does not start the installed binary"
zcat /usr/share/man/man1/sandbox-run.1.gz | grep -q '^\.TH' || fail "sandbox-run.1.gz is not a man page"
grep -q 'complete -F _sandbox' /usr/share/bash-completion/completions/sandbox ||
    fail "the bash completion does not complete sandbox"

step "sandbox doctor"
sandbox doctor

step "sandbox-runc is the OCI runtime"
sandbox-runc --version | grep -q '^sandbox-runc version' || fail "sandbox-runc --version: not the OCI face"
# A Kubernetes node's files: the pod profiles pass the installed checker.
for profile in /usr/share/sandbox/kubernetes/profiles/pod.toml \
    /usr/share/sandbox/kubernetes/profiles/pod-standard.toml; do
    sandbox profile check "$profile" || fail "$profile does not pass sandbox profile check"
done
for file in containerd-sandbox.toml runtimeclass.yaml oci.toml; do
    [ -f "/usr/share/sandbox/kubernetes/$file" ] || fail "/usr/share/sandbox/kubernetes/$file is missing"
done

step "strict run as root"
echo root-secret >/root/secret.txt
mkdir -p /root/project
(cd /root/project && sh -eu /tmp/strict-run-check.sh root)

step "strict run as a regular user"
useradd --create-home --shell /bin/sh tester
as_tester() {
    (cd /home/tester && setpriv --reuid=tester --regid=tester --init-groups \
        env HOME=/home/tester USER=tester LOGNAME=tester "$@")
}
as_tester sh -euc 'echo tester-secret > "$HOME/secret.txt"; mkdir "$HOME/project"'
as_tester sh -euc 'cd "$HOME/project" && sh -eu /tmp/strict-run-check.sh tester'

step "purge the package"
apt-get purge -y sandbox
status=$(dpkg-query -W -f '${db:Status-Abbrev}' sandbox 2>/dev/null || true)
case "$status" in
    "" | "un "* | "pn "*) ;;
    *) fail "sandbox is still known to dpkg after the purge: $status" ;;
esac

step "nothing of the package is left"
left=0
while IFS= read -r path; do
    [ "$path" = /. ] && continue
    if [ -e "$path" ] || [ -L "$path" ]; then
        # A directory that another package owns stays, as it should.
        if [ -d "$path" ] && [ ! -L "$path" ] && dpkg -S "$path" >/dev/null 2>&1; then
            continue
        fi
        echo "left behind: $path" >&2
        left=1
    fi
done </tmp/sandbox.files
[ $left = 0 ] || fail "the purge left files of the package"
for cached in /var/cache/apparmor/*/sandbox; do
    [ -e "$cached" ] && fail "the purge left $cached"
done
step "all passed"
