"""CPU seconds used over an interval by given processes, by the calling process and
its waited-for children, and the machine's idle time, from /proc (for
bench/order_read.py and bench/node_throughput.py): what a throughput figure cost,
so that a table can show whether the CPU or the network bound a run.
"""
import os
import time

CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """User + system seconds of process @pid (all its threads) so far; None when it
    is gone or unreadable."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            # the name (field 2) may hold spaces and parentheses: split after the last ")"
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, ValueError, IndexError):
        return None


def machine():
    """(idle, total) CPU seconds of the whole machine so far, all cores summed; iowait
    counts as idle (nothing was runnable)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # up to steal: guest is in user
    return (v[3] + v[4]) / CLK, sum(v) / CLK


class Meter:
    """Started at construction; stop() returns a dict: seconds (wall), procs (name ->
    CPU seconds of each named pid), self and children (this process, and the children
    it waited for in the interval), idle and busy (the machine, core-seconds)."""

    def __init__(self, pids):
        self.pids = {k: v for k, v in pids.items() if v}
        self.t0 = time.monotonic()
        self.m0 = machine()
        self.p0 = {k: proc_cpu(v) for k, v in self.pids.items()}
        self.o0 = os.times()

    def stop(self):
        o1, m1 = os.times(), machine()
        procs = {}
        for k, pid in self.pids.items():
            a, b = self.p0[k], proc_cpu(pid)
            if a is not None and b is not None:
                procs[k] = b - a
        idle = m1[0] - self.m0[0]
        return {"seconds": time.monotonic() - self.t0, "procs": procs,
                "self": (o1.user + o1.system) - (self.o0.user + self.o0.system),
                "children": ((o1.children_user + o1.children_system) -
                             (self.o0.children_user + self.o0.children_system)),
                "idle": idle, "busy": (m1[1] - self.m0[1]) - idle, "cores": os.cpu_count()}


def parse_pids(spec):
    """"name=pid,name=pid" -> {name: pid}."""
    out = {}
    for item in filter(None, spec.split(",")):
        name, pid = item.split("=", 1)
        out[name] = int(pid)
    return out
