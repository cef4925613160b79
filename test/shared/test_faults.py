"""Faults under load, each with a figure: the servers reloaded every
second, a worker killed every second with the access limiter on, Redis
stopped and started, too few file descriptors, a full disk, and a script
that raises on every request.

Each test runs MRUBY_FAULT_SECONDS seconds of load (5 by default, so that
`make test` stays short; `make test-faults` runs them for 30) and
MRUBY_FAULT_REQUESTS requests to the raising script (20,000 by default;
`make test-faults`: 1,000,000).  The figures of the long runs are in
docs/security.md ("Faults under load")."""

import os
import re
import signal
import subprocess
import threading
import time

import pytest
import requests

import harness

SECONDS = int(os.environ.get("MRUBY_FAULT_SECONDS", "5"))
REQUESTS = int(os.environ.get("MRUBY_FAULT_REQUESTS", "20000"))


def wrk(url, seconds, conns=8, close=True, script=None):
    """Runs wrk against url; returns its figures: requests, errors (socket
    errors of every kind), non2xx, max_ms."""
    cmd = ["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency",
           "--timeout", "10s"]
    if close:
        cmd += ["-H", "Connection: close"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url], capture_output=True, text=True,
                         timeout=seconds + 60).stdout
    figures = {"requests": 0, "errors": 0, "non2xx": 0, "max_ms": 0.0,
               "output": out}
    m = re.search(r"(\d+) requests in", out)
    figures["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                  r"timeout (\d+)", out)
    if m:
        figures["errors"] = sum(int(g) for g in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    figures["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)\b", out)
    if m:
        figures["max_ms"] = float(m.group(1)) * {"us": 0.001, "ms": 1,
                                                 "s": 1000}[m.group(2)]
    return figures


def every_second(seconds, action):
    """Calls action() once a second, in a thread, for seconds; returns the
    thread (joined by the caller) and a list the count goes into."""
    done = []

    def run():
        end = time.monotonic() + seconds
        while time.monotonic() + 1 < end:
            time.sleep(1)
            action()
            done.append(1)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, done


HELLO = 'get_server_class.rputs "hello"'


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_reload_every_second_under_load(kind, apache, nginx):
    """apachectl graceful (SIGUSR1) or nginx -s reload (SIGHUP) once a
    second while wrk sends requests: none fails."""
    if kind == "apache":
        s = apache("mrubySharedDict reloads 1m\n<Location />\n"
                   "  mrubyHandlerMiddle {dir}/hello.rb\n</Location>",
                   files={"hello.rb": HELLO})
        sig = signal.SIGUSR1
    else:
        s = nginx("mruby_shared_dict reloads 1m;\nserver {\n"
                  "    listen 127.0.0.1:{port};\n"
                  "    location / { mruby_content_handler {dir}/hello.rb; }\n"
                  "}", workers=2, files={"hello.rb": HELLO})
        sig = signal.SIGHUP
    master = s.master_pid()
    t, reloads = every_second(SECONDS, lambda: os.kill(master, sig))
    f = wrk(s.url("/"), SECONDS)
    t.join()
    print(f"\n{kind}: {f['requests']} requests, {len(reloads)} reloads, "
          f"{f['errors']} socket errors, {f['non2xx']} non-2xx")
    assert len(reloads) >= SECONDS - 2
    assert f["requests"] > 0, f["output"]
    assert f["errors"] == 0 and f["non2xx"] == 0, f["output"]
    assert s.master_pid() == master
    assert "exit signal" not in s.error_log()


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_worker_killed_every_second_with_the_limiter(kind, apache, nginx):
    """A worker SIGKILLed once a second while wrk requests a limited page:
    the server goes on, and once the load stops the file's count is back
    to 0 within a second (the holds of the killed workers withdrawn by the
    next sweep)."""
    import test_access_limiter as limiter
    if kind == "apache":
        s = limiter.start_apache(apache, mpm="prefork", threshold=100000)
    else:
        s = limiter.start_nginx(nginx, workers=2, threshold=100000)
    fast = os.path.join(s.docroot, "access_limiter", "fast.php")

    def kill_one():
        pids = s.worker_pids()
        if pids:
            try:
                os.kill(pids[0], signal.SIGKILL)
            except ProcessLookupError:
                pass

    t, kills = every_second(SECONDS, kill_one)
    f = wrk(s.url("/access_limiter/fast.php"), SECONDS)
    t.join()
    stopped = time.monotonic()
    got = limiter.settled_count(s, fast, "0", timeout=5)
    settled = time.monotonic() - stopped
    print(f"\n{kind}: {f['requests']} requests, {len(kills)} workers "
          f"killed, {f['errors']} socket errors, count 0 after "
          f"{settled * 1000:.0f} ms")
    assert f["requests"] > 0, f["output"]
    assert got == "0"
    assert settled < 1.5
    # the server answers as before
    assert requests.get(s.url("/access_limiter/fast.php"),
                        timeout=10).status_code == 200


# Counts the Redis calls that took longer than the timeout (0.2 s) plus
# 100 ms of scheduling slack, and keeps the longest one seen.
REDIS_CALL = r'''
Server = get_server_class
port = Server::Request.new.args.to_i
d = Server::SharedDict.new("faults")
t = Time.now
begin
  Redis.new("127.0.0.1", port, timeout: 0.2).incr("n")
  out = "counted"
rescue Redis::BaseError
  out = "failed open"
end
ms = ((Time.now - t) * 1000).to_i
d.incr("over", 1, init: 0) if ms > 300
d["max"] = ms if ms > (d["max"] || 0)
Server.rputs out
'''

READ_FIGURES = r'''
Server = get_server_class
d = Server::SharedDict.new("faults")
Server.rputs [d["over"] || 0, d["max"] || 0].inspect
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_redis_stopped_and_started_under_load(kind, apache, nginx,
                                              redis_server):
    """Redis alternately killed and started again, or frozen (SIGSTOP:
    connections are accepted, nothing is answered) and thawed, once a
    second under wrk: every request is answered (failing open), and no
    Redis call waits longer than its 0.2 s timeout."""
    scripts = {"call.rb": REDIS_CALL, "figures.rb": READ_FIGURES}
    if kind == "apache":
        s = apache("mrubySharedDict faults 1m\n"
                   "<Location /call>\n  mrubyHandlerMiddle {dir}/call.rb\n"
                   "</Location>\n<Location /figures>\n"
                   "  mrubyHandlerMiddle {dir}/figures.rb\n</Location>",
                   files=scripts)
    else:
        s = nginx("mruby_shared_dict faults 1m;\nserver {\n"
                  "    listen 127.0.0.1:{port};\n"
                  "    location /call { mruby_content_handler {dir}/call.rb; }\n"
                  "    location /figures { mruby_content_handler "
                  "{dir}/figures.rb; }\n}", workers=2, files=scripts)
    state = {"step": 0}

    def fault():
        step = state["step"] % 4
        state["step"] += 1
        if step == 0:
            redis_server.stop()
        elif step == 1:
            redis_server.start()
        elif step == 2:
            os.kill(redis_server.proc.pid, signal.SIGSTOP)
        else:
            os.kill(redis_server.proc.pid, signal.SIGCONT)

    t, faults = every_second(SECONDS, fault)
    f = wrk(s.url(f"/call?{redis_server.port}"), SECONDS)
    t.join()
    if redis_server.proc is not None:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    over, longest = eval(requests.get(s.url("/figures"), timeout=10).text)
    print(f"\n{kind}: {f['requests']} requests, {len(faults)} faults, "
          f"{f['errors']} socket errors, {f['non2xx']} non-2xx, longest "
          f"Redis call {longest} ms, {over} over 300 ms")
    assert f["requests"] > 0, f["output"]
    assert f["errors"] == 0 and f["non2xx"] == 0, f["output"]
    assert over == 0, longest


FILES = r'''
files = []
100.times { files << File.open(__FILE__) }
get_server_class.rputs "opened #{files.size}"
'''

COUNTED_HELLO = r'''
Server = get_server_class
Server::SharedDict.new("faults").incr("n", 1, init: 0)
Server.rputs "hello"
'''


def one_worker(kind, apache, nginx, scripts, extra="", start=True,
               cache=False):
    """One worker process with the dictionary "faults" and one location
    per script: {"/name": code}; cache: compiled once, at startup."""
    files = {f"{loc.strip('/')}.rb": code for loc, code in scripts.items()}
    if kind == "apache":
        conf = ("mrubyCodeCache forever\n" if cache else "") + \
            "mrubySharedDict faults 1m\n" + "\n".join(
            f"<Location {loc}>\n  mrubyHandlerMiddle {{dir}}/"
            f"{loc.strip('/')}.rb\n</Location>" for loc in scripts)
        return apache(conf + extra, mpm="prefork", start=start,
                      mpm_conf=harness.ONE_CHILD["prefork"], files=files)
    conf = ("mruby_shared_dict faults 1m;\nserver {\n"
            "    listen 127.0.0.1:{port};\n" + extra + "\n".join(
                f"    location {loc} {{ mruby_content_handler {{dir}}/"
                f"{loc.strip('/')}.rb{' cache' if cache else ''}; }}"
                for loc in scripts) + "\n}")
    return nginx(conf, workers=1, files=files, start=start)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_too_few_file_descriptors(kind, apache, nginx):
    """The server started with 64 descriptors (as under ulimit -n 64): a
    script that opens 100 files gets a 500 and a log line; 80 clients at
    once get answers, or wait, never a crash.  The descriptors the first
    script's File objects hold are given back by a full GC when its run
    ends: nothing else would collect them while every later request fails
    before it allocates (a `stat` script cannot be opened; nginx cannot
    accept)."""
    s = one_worker(kind, apache, nginx, {"/files": FILES,
                                         "/hello": COUNTED_HELLO},
                   start=False)
    # started through prlimit(1), which sets the limit and execs it
    command = s.command
    s.command = lambda: ["prlimit", "--nofile=64:64", "--"] + command()
    s.start()
    assert s.get("/hello").text == "hello"
    pids = s.worker_pids()
    with open(f"/proc/{pids[0]}/limits") as f:
        assert re.search(r"Max open files\s+64\s", f.read())

    r = s.get("/files")
    assert r.status_code == 500
    s.wait_log("files.rb:3")
    f = wrk(s.url("/hello"), SECONDS, conns=80)
    print(f"\n{kind}: {f['requests']} requests with 64 descriptors, "
          f"{f['errors']} socket errors, {f['non2xx']} non-2xx")
    assert f["requests"] > 0, f["output"]
    assert f["non2xx"] == 0, f["output"]
    assert s.worker_pids() == pids
    assert s.get("/hello").text == "hello"
    log = s.error_log()
    assert "exit signal" not in log and "signal 11" not in log


WRITE = r'''
File.open(File.join(File.dirname(__FILE__), "full", "out"), "w") do |f|
  f.write("x" * 200_000)
end
get_server_class.rputs "written"
'''

BODY = r'''
Nginx.rputs Nginx::Request.new.body.size.to_s
'''


@pytest.fixture
def full_disk():
    """A tmpfs of 64 kB, filled, mounted where the test asks; unmounted at
    the end."""
    mounted = []

    def mount(path):
        os.makedirs(path, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k",
                            "tmpfs", path], capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs (needs root): {p.stderr}")
        mounted.append(path)
        # full is what it is for; Python 3.14 raises it when the file is
        # closed, earlier ones at the write
        try:
            with open(os.path.join(path, "fill"), "wb") as f:
                f.write(b"\0" * 128 * 1024)
        except OSError:
            pass
        os.chmod(path, 0o777)
    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", path])


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_full_disk(kind, apache, nginx, full_disk):
    """The directory scripts write to (and nginx's request body buffer) on
    a full file system: the script's write is a 500 with a log line, a
    large request body a 500 from nginx, and the worker goes on."""
    scripts = {"/write": WRITE, "/hello": COUNTED_HELLO}
    extra = ""
    if kind == "nginx":
        scripts["/body"] = BODY
        extra = ("    client_body_temp_path {dir}/full/body;\n"
                 "    client_body_buffer_size 8k;\n"
                 "    mruby_enable_read_request_body on;\n")
    s = one_worker(kind, apache, nginx, scripts, extra, start=False)
    full_disk(os.path.join(s.dir, "full"))
    s.start()
    pids = s.worker_pids()

    r = s.get("/write")
    assert r.status_code == 500
    s.wait_log("/write.rb")
    if kind == "nginx":
        r = requests.post(s.url("/body"), data=b"b" * 200_000, timeout=30)
        assert r.status_code == 500
        s.wait_log("No space left on device")
    assert s.get("/hello").text == "hello"
    assert s.worker_pids() == pids


RAISE = 'raise "boom"'


def get_many(port, path, n, depth=16):
    """Sends n GETs for path over keep-alive connections, `depth` of them
    pipelined at a time; returns {status: count}."""
    import socket
    statuses = {}
    req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").encode()
    sent = 0
    sock, buf = None, b""
    while sent < n:
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            buf = b""
        batch = min(depth, n - sent)
        sock.sendall(req * batch)
        got = 0
        while got < batch:
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
            if b"\r\n\r\n" not in buf:
                break
            head, buf = buf.split(b"\r\n\r\n", 1)
            m = re.search(rb"content-length: *(\d+)", head, re.I)
            length = int(m.group(1)) if m else 0
            while len(buf) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
            buf = buf[length:]
            status = int(head.split(b" ", 2)[1])
            statuses[status] = statuses.get(status, 0) + 1
            got += 1
            if re.search(rb"connection: *close", head, re.I):
                break
        sent += got
        if got < batch or re.search(rb"connection: *close", head, re.I):
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return statuses


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_a_script_raising_on_every_request(kind, apache, nginx):
    """MRUBY_FAULT_REQUESTS requests to a script that raises: every one a
    500 with one error-log line, and the worker's memory flat (RSS growth
    under 1 MB after a warm-up of 2,000)."""
    s = one_worker(kind, apache, nginx, {"/raise": RAISE})
    pid = s.worker_pids()[0]
    assert get_many(s.port, "/raise", 2000) == {500: 2000}
    time.sleep(0.2)
    rss0 = harness.rss_kb(pid)
    lines0 = s.error_log().count('RuntimeError: boom')
    statuses = get_many(s.port, "/raise", REQUESTS)
    time.sleep(0.5)
    rss1 = harness.rss_kb(pid)
    lines = s.error_log().count('RuntimeError: boom') - lines0
    print(f"\n{kind}: {REQUESTS} requests: {statuses}, {lines} log lines, "
          f"RSS {rss0} -> {rss1} kB")
    assert statuses == {500: REQUESTS}
    assert lines == REQUESTS
    assert s.worker_pids() == [pid]
    if not harness.ASAN:
        assert rss1 - rss0 < 1024, (rss0, rss1)
