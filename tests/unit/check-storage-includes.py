#!/usr/bin/env python3
"""The storage API is the only door to a storage driver (issue 21).

Fails when a file outside a driver's directory includes one of the driver's
headers: every file under src/ except those in src/storage/<driver>/, and
the unit tests except the driver's own (test-<driver>-*.c). Nothing in src/
outside src/storage/ includes the storage's insides either (the driver table
of mail-storage-private.h, whose calls skip the modules' hooks, or the
fileindex). A front end or
the format-neutral fileindex that needs a type or constant gets it from the
storage API headers (src/storage/*.h) instead.

Nor does such a file name a driver's symbol (a `maildir_` function, type or
variable, a `MAILDIR_` constant): it calls the storage API, which passes
the call to the driver through its table (mail-storage-private.h). The one
exception is the driver list itself, which names each driver's table
(`<driver>_storage_vfuncs`) in src/storage/mail-storage.c and
mail-storage-private.h.

Usage: check-storage-includes.py <source root>"""
import os
import re
import sys

DRIVERS = ("maildir",)
# The storage's own insides: the driver table (calling it skips every
# storage module's hook) and the index. Only the storage includes them.
STORAGE_INTERNAL = ("storage/mail-storage-private.h", "storage/fileindex/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
# Comments and string literals: what they say is no call.
NOT_CODE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
DRIVER_LIST_FILES = ("src/storage/mail-storage.c", "src/storage/mail-storage-private.h")


def driver_symbols(rel, text):
    """(line, symbol, driver) for each driver symbol the code of `rel` names."""
    code = NOT_CODE.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)
    out = []
    for d in DRIVERS:
        if rel.startswith(f"src/storage/{d}/"):
            continue
        if rel.startswith("tests/unit/") and os.path.basename(rel).startswith(f"test-{d}-"):
            continue
        pattern = re.compile(r'\b(?:%s|%s)_\w+' % (d, d.upper()))
        for m in pattern.finditer(code):
            sym = m.group(0)
            if sym == f"{d}_storage_vfuncs" and rel in DRIVER_LIST_FILES:
                continue
            out.append((code.count("\n", 0, m.start()) + 1, sym, d))
    return out


def driver_of_include(path):
    """The driver whose private header `path` names, or None."""
    parts = path.split("/")
    for d in DRIVERS:
        if f"storage/{d}/" in path or parts[-1].startswith(f"{d}-"):
            return d
    return None


def resolve(root, rel, inc, quoted):
    """`inc` as a path under src/ the way the compiler finds it (next to the
    including file first for a quoted name, then src/ and the source root),
    so "../../storage/fileindex/x.h" is "storage/fileindex/x.h"; else `inc`."""
    tries = []
    if quoted:
        tries.append(os.path.normpath(os.path.join(os.path.dirname(rel), inc)))
    tries += [os.path.normpath(os.path.join("src", inc)), os.path.normpath(inc)]
    for t in tries:
        if t.startswith("src" + os.sep) and os.path.isfile(os.path.join(root, t)):
            return t[len("src" + os.sep):]
    return inc


def offences(root):
    found = []
    candidates = []
    for top in ("src", os.path.join("tests", "unit")):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith((".c", ".h")):
                    candidates.append(os.path.join(dirpath, name))
    for path in sorted(candidates):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for lineno, sym, d in driver_symbols(rel, text):
            found.append(f"{rel}:{lineno}: names {sym} (driver '{d}' private: call the storage API)")
        for lineno, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = resolve(root, rel, m.group(2), m.group(1) == '"')
            if (rel.startswith("src/") and not rel.startswith("src/storage/")
                    and any(inc.startswith(p) for p in STORAGE_INTERNAL)):
                found.append(f"{rel}:{lineno}: includes {inc} (storage internal: "
                             "front ends use the storage API)")
                continue
            d = driver_of_include(inc)
            if d is None:
                continue
            if rel.startswith(f"src/storage/{d}/"):
                continue
            if rel.startswith("tests/unit/") and os.path.basename(rel).startswith(f"test-{d}-"):
                continue
            found.append(f"{rel}:{lineno}: includes {m.group(2)} (driver '{d}' private)")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    if not os.path.isdir(os.path.join(root, "src", "storage")):
        print(f"{root}: no src/storage here", file=sys.stderr)
        return 2
    found = offences(root)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} use(s) of storage internals outside the storage",
              file=sys.stderr)
        return 1
    print("storage drivers are reached only through the storage API")
    return 0


if __name__ == "__main__":
    sys.exit(main())
