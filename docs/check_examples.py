#!/usr/bin/python3
"""Checks that every ```rules block in the docs is a valid rule file.

    /usr/bin/python3 docs/check_examples.py build/tools/rulecheck/rulecheck [DOC.md ...]

Each block is written to a temporary file and given to `rulecheck check`;
blocks with an `import` are written into examples/ so that their relative
import paths resolve the way the docs say. Exit status 0 if every block
checks, 1 otherwise (each failure is printed with its doc line). Stdlib only.
"""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DOCS = [os.path.join(HERE, "language.md"), os.path.join(HERE, "semantics.md")]
BLOCK = re.compile(r"^```rules\n(.*?)^```", re.M | re.S)


def blocks(path):
    text = open(path).read()
    for m in BLOCK.finditer(text):
        yield text.count("\n", 0, m.start()) + 2, m.group(1)


def check(rulecheck, doc, line, body):
    where = os.path.join(ROOT, "examples") if "import " in body else None
    fd, tmp = tempfile.mkstemp(suffix=".rules", prefix="doc_example_", dir=where)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
        p = subprocess.run([rulecheck, "check", tmp], capture_output=True, text=True)
    finally:
        os.unlink(tmp)
    if p.returncode != 0 or "error" in p.stderr:
        rel = os.path.relpath(doc, ROOT)
        print(f"{rel}:{line}: example does not check (exit {p.returncode})")
        print("    " + p.stderr.replace(tmp, f"<{rel}:{line}>").strip().replace("\n", "\n    "))
        return False
    return True


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rulecheck, docs = os.path.abspath(argv[0]), argv[1:] or DEFAULT_DOCS
    total = failed = 0
    for doc in docs:
        for line, body in blocks(doc):
            total += 1
            failed += not check(rulecheck, doc, line, body)
    print(f"{total - failed}/{total} doc examples check")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
