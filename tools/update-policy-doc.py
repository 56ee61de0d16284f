#!/usr/bin/env python3
"""Rewrite the key reference in docs/policy.md from the key table.

The tables between the BEGIN/END KEYS markers are what
`agentjail policy keys --markdown` prints (src/lib/policy/keys.c is their
source); tests/integration/test_policy_docs.py fails while the file and
the table disagree. Usage: tools/update-policy-doc.py [AGENTJAIL] [DOC]
(defaults: build/agentjail, docs/policy.md)."""
import subprocess
import sys

BEGIN = "<!-- BEGIN KEYS:"
END = "<!-- END KEYS -->"


def split(text):
    """(before including the BEGIN line, generated part, END line onwards)."""
    b = text.index(BEGIN)
    b = text.index("\n", b) + 1
    e = text.index(END)
    return text[:b], text[b:e], text[e:]


def main():
    aj = sys.argv[1] if len(sys.argv) > 1 else "build/agentjail"
    doc = sys.argv[2] if len(sys.argv) > 2 else "docs/policy.md"
    keys = subprocess.run([aj, "policy", "keys", "--markdown"], check=True, capture_output=True,
                          text=True).stdout
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    before, old, after = split(text)
    new = "\n" + keys + "\n"
    if new == old:
        print("%s: up to date" % doc)
        return
    with open(doc, "w", encoding="utf-8") as f:
        f.write(before + new + after)
    print("%s: key reference rewritten" % doc)


if __name__ == "__main__":
    main()
