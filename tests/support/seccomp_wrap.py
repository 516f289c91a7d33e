#!/usr/bin/env python3
"""Run a command under a seccomp filter that imitates an environment.

    seccomp_wrap.py MODE -- CMD ARGS...

MODE:
  docker      what Docker's and containerd's default profile refuses to a
              process without CAP_SYS_ADMIN: new namespaces (clone/unshare with
              namespace flags, setns) and mount calls fail with EPERM, clone3
              with ENOSYS (so callers fall back to clone)
  nolandlock  the Landlock system calls fail with ENOSYS, as on a kernel
              built without Landlock or with it left out of `lsm=`
  sysadmin    what Docker's default profile leaves refused to a container
              given CAP_SYS_ADMIN: clone and mount work, pivot_root fails
              with EPERM, clone3 with ENOSYS
  nocaps      what a user namespace without capabilities refuses, as Ubuntu
              23.10+ does to an unconfined process (AppArmor's
              apparmor_restrict_unprivileged_userns): clone and unshare with
              CLONE_NEWUSER succeed; unshare of other namespaces without
              it (what a process already in the new user namespace does),
              every mount call and pivot_root fail with EPERM
  nouserns    the process is killed (SIGSYS) when it creates a user
              namespace (clone or unshare with CLONE_NEWUSER); clone3 fails
              with ENOSYS so that callers use clone, whose flags a filter
              can see. Shows that no user namespace was attempted.

x86_64 and aarch64 only. The filter is installed with no_new_privs, so it
also binds everything CMD starts.
"""
import ctypes
import os
import platform
import struct
import sys

ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {
    "x86_64": {"clone": 56, "unshare": 272, "setns": 308, "clone3": 435,
               "mount": 165, "umount2": 166, "pivot_root": 155,
               "open_tree": 428, "move_mount": 429, "fsopen": 430,
               "fsmount": 432, "mount_setattr": 442,
               "landlock_create_ruleset": 444, "landlock_add_rule": 445,
               "landlock_restrict_self": 446},
    "aarch64": {"clone": 220, "unshare": 97, "setns": 268, "clone3": 435,
                "mount": 40, "umount2": 39, "pivot_root": 41,
                "open_tree": 428, "move_mount": 429, "fsopen": 430,
                "fsmount": 432, "mount_setattr": 442,
                "landlock_create_ruleset": 444, "landlock_add_rule": 445,
                "landlock_restrict_self": 446},
}
NAMESPACE_FLAGS = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
CLONE_NEWUSER = 0x10000000
EPERM, ENOSYS = 1, 38
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL = 0x80000000
LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06


def ins(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)


def program(mode, machine):
    nr = SYSCALLS[machine]
    prog = [ins(LD_W_ABS, 4), ins(JEQ_K, ARCH[machine], 1, 0), ins(RET_K, RET_KILL),
            ins(LD_W_ABS, 0)]
    if mode == "nolandlock":
        for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
            prog += [ins(JEQ_K, nr[name], 0, 1), ins(RET_K, RET_ERRNO | ENOSYS)]
    elif mode == "docker":
        prog += [ins(JEQ_K, nr["clone3"], 0, 1), ins(RET_K, RET_ERRNO | ENOSYS)]
        for name in ("setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount",
                     "fsopen", "fsmount", "mount_setattr"):
            prog += [ins(JEQ_K, nr[name], 0, 1), ins(RET_K, RET_ERRNO | EPERM)]
        # clone's flags are its first argument on both architectures, unshare's too.
        for name in ("clone", "unshare"):
            prog += [ins(JEQ_K, nr[name], 0, 4), ins(LD_W_ABS, 16),
                     ins(JSET_K, NAMESPACE_FLAGS, 0, 1), ins(RET_K, RET_ERRNO | EPERM),
                     ins(LD_W_ABS, 0)]
    elif mode == "sysadmin":
        prog += [ins(JEQ_K, nr["clone3"], 0, 1), ins(RET_K, RET_ERRNO | ENOSYS),
                 ins(JEQ_K, nr["pivot_root"], 0, 1), ins(RET_K, RET_ERRNO | EPERM)]
    elif mode == "nocaps":
        for name in ("mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
                     "fsmount", "mount_setattr"):
            prog += [ins(JEQ_K, nr[name], 0, 1), ins(RET_K, RET_ERRNO | EPERM)]
        # unshare with CLONE_NEWUSER goes through (a new user namespace,
        # whose creator the restriction lets have one); without it, new
        # namespaces need CAP_SYS_ADMIN in the caller's, which it withholds.
        prog += [ins(JEQ_K, nr["unshare"], 0, 5), ins(LD_W_ABS, 16),
                 ins(JSET_K, CLONE_NEWUSER, 2, 0),
                 ins(JSET_K, NAMESPACE_FLAGS, 0, 1), ins(RET_K, RET_ERRNO | EPERM),
                 ins(LD_W_ABS, 0)]
    elif mode == "nouserns":
        prog += [ins(JEQ_K, nr["clone3"], 0, 1), ins(RET_K, RET_ERRNO | ENOSYS)]
        for name in ("clone", "unshare"):
            prog += [ins(JEQ_K, nr[name], 0, 4), ins(LD_W_ABS, 16),
                     ins(JSET_K, CLONE_NEWUSER, 0, 1), ins(RET_K, RET_KILL),
                     ins(LD_W_ABS, 0)]
    else:
        sys.exit(f"seccomp_wrap.py: unknown mode {mode!r}")
    prog.append(ins(RET_K, RET_ALLOW))
    return b"".join(prog)


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    machine = platform.machine()
    if machine not in ARCH:
        sys.exit(f"seccomp_wrap.py: no tables for {machine}")
    code = program(sys.argv[1], machine)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        sys.exit(f"seccomp_wrap.py: no_new_privs: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        sys.exit(f"seccomp_wrap.py: seccomp: {os.strerror(ctypes.get_errno())}")
    os.execvp(sys.argv[3], sys.argv[3:])


main()
