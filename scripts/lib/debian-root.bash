# Sourced by scripts/test-deb and scripts/test-action: minimal Debian roots
# made with debootstrap, cached per release, and a way to run a script inside
# a throw-away copy of one.
#
# Not a chroot: the kernel refuses to create a user namespace for a process
# whose root is not its mount namespace's root (unshare(2), EPERM "in a
# chroot environment"), and every sandbox run starts with one. So the copy
# becomes the root of a private mount namespace with pivot_root, as a
# container runtime would do; its mounts vanish with the namespace.

# debian_root_base CACHE RELEASE: prints the path of a pristine root of
# RELEASE under CACHE, making it with debootstrap (from Debian's default
# mirror, or $DEBIAN_MIRROR) the first time.
debian_root_base() {
  local cache=$1 release=$2
  local base="$cache/$release"
  if [ ! -e "$base/.debootstrap-complete" ]; then
    command -v debootstrap >/dev/null || {
      echo "debootstrap is missing: apt-get install debootstrap" >&2
      return 1
    }
    rm -rf "$base.partial"
    mkdir -p "$cache"
    echo "debootstrap $release into $base (once; later runs reuse it)" >&2
    # minbase: dpkg, apt, coreutils, util-linux (runuser), passwd (useradd).
    if ! debootstrap --variant=minbase "$release" "$base.partial" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} \
      >"$cache/$release.debootstrap.log" 2>&1; then
      echo "debootstrap $release failed; its log:" >&2
      tail -n 30 "$cache/$release.debootstrap.log" >&2
      return 1
    fi
    # A package install must not try to start services in the root.
    printf '#!/bin/sh\nexit 101\n' >"$base.partial/usr/sbin/policy-rc.d"
    chmod 755 "$base.partial/usr/sbin/policy-rc.d"
    touch "$base.partial/.debootstrap-complete"
    rm -rf "$base"
    mv "$base.partial" "$base"
  fi
  printf '%s\n' "$base"
}

# debian_root_copy BASE WORK: WORK becomes a fresh copy of BASE.
debian_root_copy() {
  local base=$1 work=$2
  rm -rf "$work"
  cp -a --reflink=auto "$base" "$work"
  # For apt inside (scripts/test-action installs packages from the mirror).
  cp -L /etc/resolv.conf "$work/etc/resolv.conf"
}

# debian_root_run ROOT SCRIPT [ARGS...]: runs SCRIPT (a path inside ROOT)
# with ROOT as / in a private mount namespace, with /proc, /sys and /dev.
# Returns the script's status.
debian_root_run() {
  local root=$1
  shift
  unshare --mount --propagation private -- /bin/sh -euc '
    root=$1; shift
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mkdir -p "$root/.old-root"
    cd "$root"
    pivot_root . .old-root
    cd /
    umount -l /.old-root
    rmdir /.old-root
    exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
  ' sh "$root" "$@"
}
