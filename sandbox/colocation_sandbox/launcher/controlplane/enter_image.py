"""Run a program in an image's root filesystem, as a container runtime would start it (`--image`).

    python -m colocation_sandbox.launcher.controlplane.enter_image --root DIR --user UID:GID \\
        [--workdir DIR] [--mount SOURCE:TARGET[:ro]]... [--env NAME=VALUE]... -- PROGRAM ARGS...

As root, in a mount namespace of its own: the root filesystem bound read-only (the manifests'
readOnlyRootFilesystem), each mount bound at its target inside it, then chroot, the user's numeric
uid and gid with no supplementary groups and no new privileges (allowPrivilegeEscalation: false),
and exec PROGRAM, found on the PATH of `--env`, with exactly that environment. No /proc, /sys or
/dev is mounted in (docs/development.md#running-from-the-image says why).

Changing the uid clears PR_SET_PDEATHSIG, so it is set again after: the program still dies with
the sandbox (colocation_sandbox.launcher.child_processes). Standard library only: it runs at every
container start.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, flags: int) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), None, flags, None),
           f"mount {source} on {target}")


def _bind(source: str, target: str, *, read_only: bool) -> None:
    _mount(source, target, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _mount_point(target: Path, *, directory: bool) -> None:
    """Make the target of a mount exist in the image's tree (a working container: writable for root)."""
    if directory:
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)


def enter(root: Path, *, uid: int, gid: int, workdir: str, mounts: list[tuple[str, str, bool]],
          env: dict[str, str], program: list[str]) -> None:
    parent = os.getppid()
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host's namespace
    for source, target, _ in mounts:
        _mount_point(root / target.lstrip("/"), directory=Path(source).is_dir())
    _bind(str(root), str(root), read_only=True)
    for source, target, read_only in mounts:
        _bind(source, str(root / target.lstrip("/")), read_only=read_only)
    os.chroot(root)
    os.chdir(workdir)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the sandbox died before the signal was set again
        os.kill(os.getpid(), signal.SIGKILL)
    os.execvpe(program[0], program, env)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="enter_image")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--user", required=True, help="UID:GID, numeric")
    parser.add_argument("--workdir", default="/")
    parser.add_argument("--mount", action="append", default=[], help="SOURCE:TARGET[:ro]")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE")
    parser.add_argument("program", nargs="+")
    args = parser.parse_args(argv)
    uid, _, gid = args.user.partition(":")
    mounts = []
    for mount in args.mount:
        source, target, *mode = mount.split(":")
        mounts.append((source, target, mode == ["ro"]))
    enter(args.root, uid=int(uid), gid=int(gid or uid), workdir=args.workdir, mounts=mounts,
          env=dict(item.split("=", 1) for item in args.env), program=args.program)


if __name__ == "__main__":
    main(sys.argv[1:])
