"""make run: Ctrl-C or a SIGTERM to make stops both servers it started.

Runs `make run` itself (its deps step skipped with -o deps: it stops the
distribution's services, which other tests may be using) on free ports with
one example, waits until both servers answer, signals make the way a
terminal or a supervisor does, and checks that no server process is left.
"""

import os
import re
import signal
import subprocess
import time

import pytest

import harness

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT = 300   # make all venv may have something to build
STOP_TIMEOUT = 30


class MakeRun:
    def __init__(self, tmp_path):
        self.apache_port = harness.free_port()
        self.nginx_port = harness.free_port()
        self.out_path = tmp_path / "make-run.out"
        self.out = open(self.out_path, "wb")
        args = (f"--apache-port {self.apache_port} "
                f"--nginx-port {self.nginx_port} --only hello")
        # A session of its own, as in a terminal: killpg() is Ctrl-C.
        self.proc = subprocess.Popen(
            ["make", "-s", "-o", "deps", "run", f"RUN_ARGS={args}"],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=self.out,
            stderr=subprocess.STDOUT, start_new_session=True)

    def output(self):
        return self.out_path.read_text(errors="replace")

    def wait_serving(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"make run exited ({self.proc.returncode}):\n"
                            f"{self.output()}")
            if "Ctrl-C stops both servers" in self.output():
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"make run not serving after {START_TIMEOUT} s:\n"
                        f"{self.output()}")
        for port in (self.apache_port, self.nginx_port):
            assert harness.port_open(port), self.output()
        self.configs = re.findall(r"\(config (\S+),", self.output())
        assert len(self.configs) == 2, self.output()

    def server_pids(self):
        """Processes still running with one of the two servers' configs or
        listening on one of their ports."""
        pids = set()
        for conf in getattr(self, "configs", []):
            r = subprocess.run(["pgrep", "-f", conf], capture_output=True,
                               text=True)
            pids.update(r.stdout.split())
        for port in (self.apache_port, self.nginx_port):
            r = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"],
                               capture_output=True, text=True)
            pids.update(re.findall(r"pid=(\d+)", r.stdout))
        return sorted(pids)

    def wait_stopped(self):
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            if (self.proc.poll() is not None and not self.server_pids()
                    and not harness.port_open(self.apache_port)
                    and not harness.port_open(self.nginx_port)):
                return
            time.sleep(0.2)
        left = self.server_pids()
        self.kill_leftovers()
        pytest.fail(f"{STOP_TIMEOUT} s after the signal: make "
                    f"{'running' if self.proc.poll() is None else 'exited'}"
                    f", server processes left: {left}\n{self.output()}")

    def kill_leftovers(self):
        for pid in self.server_pids():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self):
        self.kill_leftovers()
        self.out.close()


@pytest.fixture
def make_run(tmp_path):
    runs = []

    def start():
        run = MakeRun(tmp_path)
        runs.append(run)
        run.wait_serving()
        return run

    yield start
    for run in runs:
        run.close()


def test_sigterm_to_make_stops_both_servers(make_run):
    run = make_run()
    os.kill(run.proc.pid, signal.SIGTERM)
    run.wait_stopped()
    assert "stopping..." in run.output()


def test_sigterm_to_the_process_group_stops_both_servers(make_run):
    # kill %job, timeout(1), a service manager: make and run.py both get
    # it, and make passes its own on, so run.py sees two.
    run = make_run()
    os.killpg(run.proc.pid, signal.SIGTERM)
    run.wait_stopped()


def test_ctrl_c_stops_both_servers(make_run):
    run = make_run()
    os.killpg(run.proc.pid, signal.SIGINT)
    run.wait_stopped()


def test_second_signal_while_stopping_stops_both_servers(make_run):
    # An impatient Ctrl-C, then a SIGTERM: the second signal arrives while
    # the first server is being stopped and must not cut that short.
    run = make_run()
    os.killpg(run.proc.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(run.proc.pid, signal.SIGINT)
    time.sleep(0.05)
    os.kill(run.proc.pid, signal.SIGTERM)
    run.wait_stopped()


def test_sigterm_while_a_server_starts_stops_it(tmp_path):
    # The signal comes as soon as nginx (started second) listens: run.py
    # is then still waiting in its start, before it would have counted it
    # among the servers to stop.
    run = MakeRun(tmp_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not harness.port_open(run.nginx_port):
            assert run.proc.poll() is None, run.output()
            assert time.monotonic() < deadline, run.output()
            time.sleep(0.002)
        os.kill(run.proc.pid, signal.SIGTERM)
        run.wait_stopped()
        assert not harness.port_open(run.apache_port)
    finally:
        run.close()
