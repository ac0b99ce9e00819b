#!/usr/bin/env python3
"""Layers only call down (docs/architecture.md "Layers").

Every file under src/ belongs to a layer by its top folder. A file may
include headers of its own layer's folder and of the layers below it, never
of a layer above or of a sibling at its own level:

    cmd, ctl          the binaries and petrelctl's commands
    server            the process: configuration, daemon, privileges
    protocols, services   front ends and components (siblings: no includes
                      between them, nor between two protocols or two
                      services; protocols/common is shared by the protocols)
    clients           clients of our own services (auth, warden, ring): libraries
                      that may use each other (the warden's penalty store
                      implements auth's penalty-store interface)
    storage           mail storage, its modules and drivers
    dict, sql         key-value dicts and the SQL layer (dict may use sql;
                      both may use net: host name lookups on the loop)
    net               connections, listeners, HTTP, TLS
    core              buffers, errors, config reading, time, logging

petrelctl is a thin client: src/ctl may use only core, net and clients.

Usage: check-layering.py <source root>          (exit 1 with a list)
       check-layering.py --self-test             (the rules catch breaches)"""
import os
import re
import sys

# What each top folder may include, besides itself.
ALLOWED = {
    "core": set(),
    "net": {"core"},
    "sql": {"net", "core"},
    "dict": {"sql", "net", "core"},
    "storage": {"dict", "sql", "net", "core"},
    "clients": {"net", "core"},
    "protocols": {"clients", "storage", "dict", "sql", "net", "core"},
    "services": {"clients", "storage", "dict", "sql", "net", "core"},
    "server": {"protocols", "services", "clients", "storage", "dict", "sql", "net", "core"},
    "ctl": {"clients", "net", "core"},
    "cmd": {"server", "ctl", "protocols", "services", "clients", "storage", "dict", "sql",
            "net", "core"},
}
# Folders whose subfolders are siblings that must not include each other
# (a shared subfolder every sibling may use is named here).
SIBLING_FOLDERS = {"protocols": {"common"}, "services": set()}
# Quoted and angled: the build's include path has src/ and the source root,
# so <services/auth/x.h> and "src/services/auth/x.h" reach the same header.
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def resolve(file_rel, inc, quoted, exists):
    """The header `inc`, included by `file_rel` (both under src/), as a path
    under src/ the way the compiler finds it: a quoted name next to the
    including file first ("../pop3/x.h", "x.h"), then from src/ or the
    source root ("src/..."). `exists(path under src/)` says whether a header
    is there. None: not a header of src/ (a system or generated header)."""
    candidates = []
    if quoted:
        candidates.append(os.path.normpath(os.path.join(os.path.dirname(file_rel), inc)))
    candidates.append(os.path.normpath(inc))
    if inc.startswith("src/"):
        candidates.append(os.path.normpath(inc[len("src/"):]))
    for c in candidates:
        if not c.startswith("..") and exists(c):
            return c
    return None


def breach(file_rel, inc):
    """Why `file_rel` (a path under src/) may not include `inc`, or None."""
    fparts = file_rel.split("/")
    iparts = inc.split("/")
    ftop, itop = fparts[0], iparts[0]
    if itop not in ALLOWED:
        return None  # a system or generated header (version.h)
    if ftop not in ALLOWED:
        return f"{file_rel} is in no layer"
    if itop != ftop:
        if itop in ALLOWED[ftop]:
            return None
        return f"{ftop} may not include {itop} (a layer above or beside it)"
    shared = SIBLING_FOLDERS.get(ftop)
    if shared is None or len(fparts) < 3 or len(iparts) < 3:
        return None
    fsub, isub = fparts[1], iparts[1]
    if fsub == isub or isub in shared:
        return None
    return f"{ftop}/{fsub} may not include {ftop}/{isub} (siblings)"


def offences(root):
    found = []
    src = os.path.join(root, "src")
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m is None:
                        continue
                    inc = m.group(2)
                    target = resolve(rel, inc, m.group(1) == '"',
                                     lambda c: os.path.isfile(os.path.join(src, c)))
                    why = breach(rel, target if target is not None else inc)
                    if why is not None:
                        close = '"' if m.group(1) == '"' else ">"
                        found.append(f"src/{rel}:{lineno}: #include {m.group(1)}{inc}{close}: {why}")
    return found


def self_test():
    """Each rule refuses what it should and allows what it should."""
    bad = [
        ("protocols/imap/imap-server.c", "services/auth/auth-service.h"),
        ("protocols/imap/imap-x.c", "protocols/pop3/pop3-private.h"),
        ("services/backend-api/api-x.c", "services/warden/warden-registry.h"),
        ("services/monitor/m.c", "services/director/director-state.h"),
        ("clients/auth/auth-client.c", "services/auth/auth-db.h"),
        ("storage/mail-storage.c", "protocols/imap/imap-private.h"),
        ("storage/x.c", "clients/auth/userdb.h"),
        ("net/x.c", "storage/mail-storage.h"),
        ("core/x.c", "net/tls.h"),
        ("ctl/ctl-x.c", "services/auth/auth-db.h"),
        ("ctl/ctl-x.c", "storage/mail-storage.h"),
        ("sql/x.c", "dict/dict.h"),
    ]
    good = [
        ("protocols/imap/imap-server.c", "clients/auth/auth-client.h"),
        ("protocols/imap/imap-server.c", "protocols/common/mail-session-io.h"),
        ("protocols/imap/imap-server.c", "protocols/imap/imap-private.h"),
        ("services/auth/auth-service.c", "clients/auth/auth-penalty.h"),
        ("clients/warden/warden-penalty-store.h", "clients/auth/auth-penalty.h"),
        ("server/daemon.c", "services/auth/auth-service.h"),
        ("cmd/petreld.c", "server/daemon.h"),
        ("ctl/ctl-auth.c", "clients/auth/password-scheme.h"),
        ("dict/dict-sql.c", "sql/sql-stmt.h"),
        ("storage/x.c", "version.h"),
    ]
    ok = True
    # Spelled another way, the same header is the same breach.
    tree = {"protocols/pop3/pop3-server.h", "services/auth/auth-service.h",
            "protocols/imap/imap-private.h", "clients/auth/auth-client.h"}
    spelled = [
        ("protocols/imap/imap-x.c", "../pop3/pop3-server.h", True),
        ("protocols/imap/imap-x.c", "../../services/auth/auth-service.h", True),
        ("protocols/imap/imap-x.c", "services/auth/auth-service.h", False),
        ("protocols/imap/imap-x.c", "src/services/auth/auth-service.h", True),
        ("protocols/imap/imap-x.c", "./../pop3/../pop3/pop3-server.h", True),
    ]
    for f, i, quoted in spelled:
        target = resolve(f, i, quoted, tree.__contains__)
        if target is None or breach(f, target) is None:
            print(f"self-test: {f} including {i} was allowed (resolved to {target})")
            ok = False
    for f, i, want in [("protocols/imap/imap-x.c", "imap-private.h", "protocols/imap/imap-private.h"),
                       ("protocols/imap/imap-x.c", "event2/event.h", None)]:
        if resolve(f, i, True, tree.__contains__) != want:
            print(f"self-test: {f} including {i} did not resolve to {want}")
            ok = False
    for f, i in bad:
        if breach(f, i) is None:
            print(f"self-test: {f} including {i} was allowed")
            ok = False
    for f, i in good:
        if breach(f, i) is not None:
            print(f"self-test: {f} including {i} was refused: {breach(f, i)}")
            ok = False
    return ok


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return 0 if self_test() else 1
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if not self_test():
        return 1
    found = offences(sys.argv[1])
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} include(s) break the layering (docs/architecture.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
