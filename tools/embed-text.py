#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Embed a text file in C: embed-text.py NAME OUT.c IN [--strip-comments]

Writes `const char NAME[] = "...";` (with --strip-comments, lines whose first
non-blank character is '#' are left out: the Python bootstrap's comments
need not travel in every parked interpreter's command line)."""
import sys


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    name, out, src = sys.argv[1:4]
    strip = "--strip-comments" in sys.argv[4:]
    with open(src, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if strip:
        lines = [l for l in lines if not l.lstrip().startswith("#")]
    text = "\n".join(lines) + "\n"
    if "\0" in text:
        print("embed-text.py: %s has a NUL byte" % src, file=sys.stderr)
        return 1
    with open(out, "w", encoding="utf-8") as f:
        f.write("/* Generated from %s by tools/embed-text.py: do not edit. */\n" % src.split("/src/")[-1])
        f.write("extern const char %s[];\nconst char %s[] =\n" % (name, name))
        for l in text.splitlines(keepends=True):
            esc = l.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
            f.write('    "%s"\n' % esc)
        f.write("    ;\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
