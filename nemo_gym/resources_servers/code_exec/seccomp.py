"""A seccomp filter (classic BPF, as bwrap's `--seccomp FD` loads it) that stops the program creating namespaces.

A new user namespace would let an unprivileged program mount its own tmpfs, whose pages no rlimit counts: the one
way out of the memory limit that needs no privilege. The filter refuses `unshare`, `clone` with CLONE_NEWUSER, and
`clone3` (its flags sit behind a pointer the filter cannot read; ENOSYS makes the C library fall back to `clone`),
and any system call made through another ABI (i386 or x32 on x86_64), where the numbers differ.
"""

import errno
import platform
import struct
from typing import Optional

_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_CLONE_NEWUSER = 0x10000000
_X32_SYSCALL_BIT = 0x40000000
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (low half first: little-endian only)
_NR, _ARCH, _ARG0 = 0, 4, 16

# machine -> (AUDIT_ARCH_*, clone, unshare, clone3)
_ARCHES = {
    "x86_64": (0xC000003E, 56, 272, 435),
    "aarch64": (0xC00000B7, 220, 97, 435),
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def namespace_filter(machine: Optional[str] = None) -> Optional[bytes]:
    """The compiled filter for this machine's architecture; None where the system call numbers are not known."""
    numbers = _ARCHES.get(machine or platform.machine())
    if numbers is None:
        return None
    arch, clone, unshare, clone3 = numbers
    refuse = _op(_RET, _ERRNO | errno.EPERM)
    return b"".join([
        _op(_LD_W_ABS, _ARCH),
        _op(_JEQ, arch, jt=1),  # the native ABI: skip the refusal
        refuse,
        _op(_LD_W_ABS, _NR),
        _op(_JGE, _X32_SYSCALL_BIT, jf=1),
        refuse,
        _op(_JEQ, unshare, jf=1),
        refuse,
        _op(_JEQ, clone3, jf=1),
        _op(_RET, _ERRNO | errno.ENOSYS),
        _op(_JEQ, clone, jt=1),
        _op(_RET, _ALLOW),
        _op(_LD_W_ABS, _ARG0),
        _op(_JSET, _CLONE_NEWUSER, jf=1),
        refuse,
        _op(_RET, _ALLOW),
    ])
