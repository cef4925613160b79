"""The iterations of an nginx worker's event loop, timed from inside the
kernel: from the return of one epoll_wait to the entry of the next (what
the worker did for the events that call handed it), with the time it was
off the CPU in between split by why (preempted by another task, which is
this shared machine's load, or asleep in a system call), and how long it
waited for a CPU once woken before the iteration.  Needs `perf` and root;
a client's timing includes its own scheduling, this does not.  Times are
CLOCK_MONOTONIC seconds (Python's time.monotonic()), so a client's slow
request can be matched with what the worker did meanwhile.

    with LoopTrace(pid) as trace:
        ...                    # traffic
    trace.iterations           # [Iteration], in order
    trace.writes               # times of the worker's writev calls
    trace.reads                # times of its recvfrom calls
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

LINE = re.compile(r"^\s*\S.*?\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+([\w:]+):(.*)$")
SWITCH = re.compile(r"prev_pid=(\d+) .*?prev_state=(\S+) ==> .*?next_pid=(\d+)")


@dataclass
class Iteration:
    start: float                # epoll_wait returned (s)
    wall_ms: float = 0.0        # until the next epoll_wait
    preempted_ms: float = 0.0   # runnable, another task on the CPU
    asleep_ms: float = 0.0      # blocked in a system call, until woken
    writes: int = 0             # responses written (writev)
    woken_wait_ms: float = 0.0  # woken in epoll_wait, waiting for a CPU

    @property
    def cpu_ms(self):
        return self.wall_ms - self.preempted_ms - self.asleep_ms


@dataclass
class LoopTrace:
    pid: int
    iterations: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    reads: list = field(default_factory=list)

    @staticmethod
    def available():
        return shutil.which("perf") is not None and os.geteuid() == 0

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="loop-trace-")
        self.data = os.path.join(self.dir, "perf.data")
        p = self.pid
        own = f"common_pid == {p}"
        self.proc = subprocess.Popen(
            ["perf", "record", "-a", "-k", "CLOCK_MONOTONIC", "-o", self.data,
             "-e", "sched:sched_switch",
             "--filter", f"prev_pid == {p} || next_pid == {p}",
             "-e", "sched:sched_wakeup", "--filter", f"pid == {p}",
             "-e", "syscalls:sys_enter_epoll_wait", "--filter", own,
             "-e", "syscalls:sys_exit_epoll_wait", "--filter", own,
             "-e", "syscalls:sys_enter_writev", "--filter", own,
             "-e", "syscalls:sys_enter_recvfrom", "--filter", own],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # perf says nothing when it is ready: a marker system call of the
        # worker is not available, so wait for the data file's header
        for _ in range(200):
            if os.path.exists(self.data) and os.path.getsize(self.data) > 0:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"perf record: {self.proc.stderr.read()}")
            subprocess.run(["sleep", "0.05"])
        subprocess.run(["sleep", "0.5"])
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        out = subprocess.run(["perf", "script", "-i", self.data],
                             capture_output=True, text=True).stdout
        shutil.rmtree(self.dir, ignore_errors=True)
        self.iterations = self._parse(out)
        return False

    def _parse(self, text):
        pid = str(self.pid)
        # the loop's epoll instance is the one the worker waits on most;
        # others (the file watch's own check of its queue) are not the loop
        fds = re.findall(r"sys_enter_epoll_wait: epfd: (0x[0-9a-f]+)", text)
        loop_fd = max(set(fds), key=fds.count) if fds else None
        its, cur, inner, waited = [], None, False, 0.0
        off_since, off_why, woken = None, None, None

        for line in text.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            t, event, rest = float(m.group(2)), m.group(3), m.group(4)
            on_cpu = None
            if event == "sched:sched_wakeup":
                if off_since is not None and woken is None:
                    woken = t
                continue
            if event == "sched:sched_switch":
                s = SWITCH.search(rest)
                if s and s.group(1) == pid:
                    off_since, woken = t, None
                    off_why = "R" if s.group(2).startswith("R") else "S"
                elif s and s.group(3) == pid:
                    on_cpu = t
            elif m.group(1) == pid:
                # the switch back is not always recorded (from the idle
                # task): an event of the worker's own shows it runs
                on_cpu = t

            if on_cpu is not None and off_since is not None:
                if cur is None:
                    waited = (t - woken) * 1000 if woken else 0.0
                else:
                    # asleep until woken, then waiting for a CPU
                    since = max(off_since, cur.start)
                    wake = since if off_why == "R" else \
                        woken if woken and woken > since else t
                    cur.asleep_ms += (wake - since) * 1000
                    cur.preempted_ms += (t - wake) * 1000
                off_since, woken = None, None

            if event.startswith("sched:") or m.group(1) != pid:
                continue
            if event == "syscalls:sys_enter_epoll_wait" \
                    and f"epfd: {loop_fd}" not in rest:
                inner = True
            elif event == "syscalls:sys_exit_epoll_wait" and inner:
                inner = False
            elif event == "syscalls:sys_exit_epoll_wait":
                cur = Iteration(start=t, woken_wait_ms=waited)
                waited = 0.0
            elif event == "syscalls:sys_enter_epoll_wait" and cur is not None:
                cur.wall_ms = (t - cur.start) * 1000
                its.append(cur)
                cur = None
            elif event == "syscalls:sys_enter_recvfrom":
                self.reads.append(t)
            elif event == "syscalls:sys_enter_writev":
                self.writes.append(t)
                if cur is not None:
                    cur.writes += 1
        return its
