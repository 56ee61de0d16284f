#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The sandbox side calls nothing that may malloc or lock.

Between clone and execve, agentjail's sandbox side (src/lib/run/child.c)
runs in a raw clone of a process that may have other threads: a malloc or
a lock that another thread held at the moment of the clone is never
released in the child, which then hangs (STYLE.md §3). This check reads the
compiled objects, not the source: it follows every call (direct, tail
call, or a function's address taken) from each function of the root
object through the project's own static libraries, and fails on any
function outside them that is not on the allow-list below (async-signal-
safe calls per signal-safety(7), raw system-call wrappers, string
functions). An indirect call through a pointer cannot be followed and
fails too.

    check-child-calls.py [--root OBJNAME[,OBJNAME...]] LIB.a|OBJ.o...
    check-child-calls.py --self-test CC

Exit 0: clean; 1: a forbidden call (each printed with the call chain that
reaches it); 2: usage or tool error; 77: sanitizer-instrumented objects
(not what a release build runs between clone and exec: not checked).
"""
import os
import re
import subprocess
import sys
import tempfile

# glibc functions the sandbox side may call. Each is async-signal-safe
# (signal-safety(7)), or a thin system-call wrapper, or pure computation on
# the caller's memory. Names only: the fortified __*_chk variants of
# these are accepted too.
ALLOWED = set("""
    _exit abort execve execv fexecve
    open openat close read write pread pwrite readv writev lseek fstat fstatat stat lstat statx
    dup dup2 dup3 pipe pipe2 fcntl ioctl poll ppoll
    socket socketpair send sendmsg sendto recv recvmsg recvfrom connect bind listen accept accept4 shutdown
    mkdir mkdirat mknod mknodat unlink unlinkat rmdir rename renameat symlink symlinkat link linkat
    chdir fchdir chmod fchmod fchmodat chown fchown fchownat lchown umask utimensat futimens
    readlink readlinkat truncate ftruncate fsync fdatasync access faccessat
    mount umount umount2 pivot_root chroot
    getpid getppid gettid getuid geteuid getgid getegid getgroups setgroups
    setuid setgid setresuid setresgid setreuid setregid setsid setpgid getpgrp
    kill tgkill sigaction sigprocmask pthread_sigmask sigemptyset sigfillset sigaddset sigdelset
    sigismember sigpending sigsuspend raise
    prctl setns unshare sethostname setdomainname setrlimit prlimit getrlimit
    wait waitpid waitid wait4 ptrace syscall
    clock_gettime time nanosleep uname getrandom getentropy statfs fstatfs
    getenv strerrordesc_np environ
    memfd_create mmap munmap mprotect
    tcgetattr tcsetattr tcgetpgrp tcsetpgrp isatty
    memcpy memmove memset memchr memrchr memcmp bcmp
    strlen strnlen strchr strrchr strchrnul strcmp strncmp strcpy stpcpy strncpy strcat
    strcspn strspn strstr strpbrk
    strtol strtoul strtoll strtoull
    __errno_location __stack_chk_fail
    vsnprintf snprintf
""".split())

# Why vsnprintf/snprintf are on the list although POSIX does not call them
# async-signal-safe: glibc formats into the caller's buffer through a string
# stream that takes no lock (_IO_USER_LOCK), and allocates only for wide
# strings, positional arguments or widths beyond its stack buffer, none of
# which the sandbox side uses (aj_err, small path and number formats).
# environ: the variable itself (the relay blanks its copy of the
# environment's strings in place; no call).
# getenv: glibc's reads environ with no lock and no allocation (setenv
# builds a new array and swaps the pointer, so a snapshot taken by clone
# is consistent); the sandbox side reads a test knob with it.
# strerror_r is NOT on the list: it goes through the message catalogue
# (dcgettext: a lock, and malloc when a catalogue loads).

FORTIFY = re.compile(r"^__(\w+)_chk$")
LFS = re.compile(r"^(\w+)64$")  # open64, fstat64...: the same calls with 64-bit offsets


def run(cmd):
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write("check-child-calls: %s: %s\n" % (" ".join(cmd), getattr(e, "stderr", "") or e))
        sys.exit(2)


def member_of(line, current):
    """objdump's per-object header: 'x.c.o:     file format elf64-x86-64'."""
    m = re.match(r"^(\S+):\s+file format ", line)
    return os.path.basename(m.group(1)) if m else current


def read_symbols(path):
    """(member, name) -> (section, value, size, local) for defined functions;
    and per member, its defined names."""
    funcs = {}
    defined = {}
    member = os.path.basename(path)
    for line in run(["objdump", "-t", path]).splitlines():
        member = member_of(line, member)
        m = re.match(r"^([0-9a-f]+) (.)(.)(.)(.)(.)(.)(.) (\S+)\s+([0-9a-f]+)\s+(?:\.hidden\s+)?(\S+)$", line)
        if not m:
            continue
        value, bind, kind, section, size, name = (int(m.group(1), 16), m.group(2), m.group(8),
                                                  m.group(9), int(m.group(10), 16), m.group(11))
        if section == "*UND*":
            continue
        defined.setdefault(member, set()).add(name)
        if kind == "F":
            funcs[(member, name)] = (section, value, size, bind == "l")
    return funcs, defined


def read_calls(path, funcs):
    """(member, function) -> list of targets: ('sym', name) for a symbol,
    ('sec', section, offset) for a section-relative reference, and
    ('indirect', text) for a call through a pointer."""
    calls = {}
    member = os.path.basename(path)
    cur = None
    section = None
    for line in run(["objdump", "-dr", "--no-show-raw-insn", path]).splitlines():
        new = member_of(line, member)
        if new != member:
            member, cur = new, None
            continue
        m = re.match(r"^Disassembly of section (\S+):", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            cur = (member, m.group(1))
            calls.setdefault(cur, [])
            continue
        if cur is None:
            continue
        m = re.match(r"^\s+[0-9a-f]+: (R_X86_64_\w+)\s+(\S+?)([-+]0x[0-9a-f]+)?$", line)
        if m:
            sym, addend = m.group(2), int(m.group(3) or "0", 16)
            if sym.startswith("."):
                calls[cur].append(("sec", sym, addend))
            else:
                calls[cur].append(("sym", sym))
            continue
        m = re.match(r"^\s+[0-9a-f]+:\s+(call|jmp)\s+(\*.*)$", line)
        if m:
            calls[cur].append(("indirect", line.strip()))
            continue
        m = re.match(r"^\s+[0-9a-f]+:\s+(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)(?:\+0x[0-9a-f]+)?>", line)
        if m and m.group(1) != cur[1]:
            calls[cur].append(("sym", m.group(1)))
    return calls


def check(paths, root):
    funcs, defined, calls = {}, {}, {}
    for p in paths:
        f, d = read_symbols(p)
        funcs.update(f)
        for k, v in d.items():
            defined.setdefault(k, set()).update(v)
        calls.update(read_calls(p, f))
    global_funcs = {name: (mem, name) for (mem, name), (_, _, _, local) in funcs.items() if not local}
    global_names = set()
    for mem, names in defined.items():
        for n in names:
            if (mem, n) not in funcs or not funcs[(mem, n)][3]:
                global_names.add(n)

    def resolve(mem, target):
        """A target of a call in member mem: ('func', key), ('data', None),
        ('ext', name) or ('indirect', text)."""
        if target[0] == "indirect":
            return target
        if target[0] == "sec":
            _, sec, addend = target
            for off in (addend + 4, addend):
                for key, (s, value, size, _) in funcs.items():
                    if key[0] == mem and s == sec and value <= off < value + max(size, 1):
                        return ("func", key)
            return ("data", None)  # a string constant, a table
        name = target[1]
        if (mem, name) in funcs:
            return ("func", (mem, name))
        if name in global_funcs:
            return ("func", global_funcs[name])
        if name in global_names or name in defined.get(mem, ()):
            return ("data", None)  # a variable of ours
        return ("ext", name)

    # A sanitizer build instruments every function with calls into its
    # runtime (which allocates): what it runs between clone and exec is
    # not what a release build runs. Skipped there (77: meson's skip).
    for targets in calls.values():
        for t in targets:
            if t[0] == "sym" and t[1].startswith(("__asan_", "__ubsan_", "__tsan_", "__msan_")):
                print("sanitizer-instrumented objects (%s): the check is for uninstrumented builds" % t[1])
                return 77
    want = root.split(",")
    roots = [k for k in calls if k[0] in want]
    if not roots or any(not any(k[0] == w for k in calls) for w in want):
        sys.stderr.write("check-child-calls: no function of %s in %s\n" % (root, " ".join(paths)))
        sys.exit(2)
    parent = {k: None for k in roots}
    todo = list(roots)
    bad = []
    while todo:
        key = todo.pop()
        for t in calls.get(key, []):
            kind, what = resolve(key[0], t)[0], resolve(key[0], t)[1]
            if kind == "func":
                if what not in parent:
                    parent[what] = key
                    todo.append(what)
            elif kind == "indirect":
                bad.append((key, "an indirect call (%s)" % what))
            elif kind == "ext":
                m = FORTIFY.match(what)
                base = m.group(1) if m else what
                m = LFS.match(base)
                base = m.group(1) if m and m.group(1) in ALLOWED else base
                if base not in ALLOWED:
                    bad.append((key, what))
    for key, what in sorted(set(bad)):
        chain = []
        k = key
        while k is not None:
            chain.append(k[1])
            k = parent[k]
        print("forbidden on the sandbox side: %s, called from %s" % (what, " <- ".join(chain)))
    if not bad:
        print("sandbox side: %d functions reachable from %s, every outside call allowed" %
              (len(parent), root))
    return 1 if bad else 0


SELF_TEST = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int helper(int n) { char *p = malloc((size_t)n); if (!p) return -1; free(p); return 0; }
int child_main_bad(int n);
int child_main_bad(int n) { if (helper(n) < 0) _exit(1); return (int)strlen("x"); }
"""
SELF_TEST_OK = r"""
#include <string.h>
#include <unistd.h>
int child_main_ok(int fd);
int child_main_ok(int fd) { if (write(fd, "x", 1) != 1) _exit(1); return (int)strlen("x"); }
"""


def self_test(cc):
    """The check must be able to fail: a malloc two calls deep is caught
    (through a static helper), and its positive control passes."""
    with tempfile.TemporaryDirectory() as d:
        results = []
        for name, src, want in (("bad", SELF_TEST, 1), ("ok", SELF_TEST_OK, 0)):
            c, o = os.path.join(d, name + ".c"), os.path.join(d, name + ".o")
            with open(c, "w") as f:
                f.write(src)
            run([cc, "-O2", "-fno-inline", "-c", c, "-o", o])
            got = check([o], name + ".o")
            results.append(got == want)
            print("self-test %s: exit %d (want %d)" % (name, got, want))
        return 0 if all(results) else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return self_test(argv[2])
    # The raw clones' code: the sandbox side, and the egress proxy's and
    # relay's (egress_child.c).
    root = "child.c.o,egress_child.c.o,zygote_child.c.o"
    args = argv[1:]
    if len(args) >= 2 and args[0] == "--root":
        root, args = args[1], args[2:]
    if not args:
        sys.stderr.write(__doc__)
        return 2
    return check(args, root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
