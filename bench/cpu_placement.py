"""Where the bench's processes may run, and what CPU time they used: the
CPU placement of bench/login_proxy_bench.py.

    shared  every process may run on every CPU (the kernel places them)
    split   the proxies (Petrel's login proxy, Dovecot's whole process tree)
            on one CPU, everything else (load generator, the bench driver,
            backends, directors, auth, monitor) on another: the proxy on a
            host of its own, as deployed, and client plus backend on the same
            CPU whether they talk directly or through the proxy
    backend the servers (backends, directors, auth, monitor) on one CPU,
            the clients' side (load generator, bench driver, proxies) on the
            other: the backend on a host of its own, as deployed, whether
            the client talks to it directly or through the proxy

Pinning is per thread, as `taskset -a -p` does (every entry of
/proc/PID/task); a thread or child made later inherits the affinity of the
one that made it. `pin()` reads every task's Cpus_allowed_list back, so a
placement that did not take is an error, not a wrong number."""

import os


def cpus_available():
    """The CPUs this process may use now, sorted."""
    return sorted(os.sched_getaffinity(0))


def split_sets(cpus):
    """(everything else, proxies): the first two of `cpus` (the CPUs the
    bench had before it pinned anything), or None when there is only one."""
    cpus = sorted(cpus)
    if len(cpus) < 2:
        return None
    return {cpus[0]}, {cpus[1]}


def tasks(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def allowed(tid):
    """The Cpus_allowed_list of a thread, as a set of CPU numbers."""
    with open(f"/proc/{tid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                out = set()
                for part in line.split(":", 1)[1].strip().split(","):
                    lo, _, hi = part.partition("-")
                    out.update(range(int(lo), int(hi or lo) + 1))
                return out
    raise RuntimeError(f"no Cpus_allowed_list for {tid}")


def pin(pids, cpus, nice=None):
    """Every thread of every pid on `cpus` (a set), checked, and at `nice`
    when given; returns the number of threads pinned. A pid that is gone is
    skipped."""
    n = 0
    for pid in pids:
        for tid in tasks(pid):
            try:
                os.sched_setaffinity(tid, cpus)
                if nice is not None:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
            except ProcessLookupError:
                continue
            got = allowed(tid)
            if got != set(cpus):
                raise RuntimeError(f"thread {tid} of {pid}: allowed {sorted(got)}, "
                                   f"wanted {sorted(cpus)}")
            n += 1
    return n


def children(pid):
    """Every descendant of pid (by the ppid in /proc/*/stat)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        parent.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in parent.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def stat_cpu(text, with_children=False):
    """User + system CPU seconds from the text of a /proc/PID/stat;
    `with_children` adds the waited-for children's (cutime, cstime)."""
    fields = text.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if with_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid, with_children=False):
    with open(f"/proc/{pid}/stat") as f:
        return stat_cpu(f.read(), with_children)


def tree_cpu_seconds(root):
    """CPU seconds of a process tree: every live process plus the children
    each has reaped (a login process that exited still counts)."""
    total = cpu_seconds(root, with_children=True)
    for c in children(root):
        try:
            total += cpu_seconds(c, with_children=True)
        except FileNotFoundError:
            pass  # reaped meanwhile: its time moves to the root's cutime
    return total
