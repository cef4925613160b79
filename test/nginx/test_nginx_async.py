"""ngx_mruby: scripts that wait (Nginx::Async.sleep, sleep, Nginx.sleep) on
one worker without blocking it: in each phase, inside blocks and methods
that C called, many at once; errors after a wait, a client that leaves,
reload and quit, and the places that refuse to wait."""

import concurrent.futures
import os
import signal
import socket
import threading
import time

import pytest
import requests

import harness


def code(ruby):
    """An inline script as an nginx string argument."""
    return "'" + ruby.replace("\\", "\\\\").replace("'", "\\'") + "'"


def loc(path, directive, ruby, extra=""):
    return (f"location {path} {{ {extra} {directive} {code(ruby)}; }}\n")


def test_sleep_in_each_phase_waits_and_answers(nginx):
    n = nginx(
        loc("/rewrite", "mruby_rewrite_handler_code",
            'Nginx::Async.sleep 50; Nginx::Request.new.headers_in["X-P"] = "r"',
            extra="mruby_content_handler_code 'Nginx.rputs Nginx::Request."
                  "new.headers_in[\"X-P\"].to_s';")
        + loc("/access", "mruby_access_handler_code",
              "sleep 0.05; Nginx.return Nginx::HTTP_FORBIDDEN")
        + loc("/access_ok", "mruby_access_handler_code",
              "Nginx.sleep 0.05",
              extra="mruby_content_handler_code 'Nginx.rputs \"granted\"';")
        + loc("/content", "mruby_content_handler_code",
              'Nginx.rputs "a"; Nginx::Async.sleep 50; Nginx.rputs "b"'))

    t0 = time.monotonic()
    r = n.get("/rewrite")
    assert (r.status_code, r.text) == (200, "r")
    assert time.monotonic() - t0 >= 0.05
    assert n.get("/access").status_code == 403
    assert n.get("/access_ok").text == "granted"
    r = n.get("/content")
    assert (r.status_code, r.text) == (200, "ab")


def test_sleep_inside_blocks_and_methods_that_c_called(nginx):
    n = nginx(loc("/", "mruby_content_handler_code", """
h = Hash.new { |hash, k| Nginx::Async.sleep(10); hash[k] = k * 2 }
o = Object.new
def o.to_s; Nginx::Async.sleep(10); "obj"; end
Nginx.rputs "#{h[21]} #{o} "
s = [3, 1, 2].sort_by { |x| Nginx::Async.sleep(5); x }
Nginx.rputs s.map { |x| sleep(0.005); x * 10 }.join(",")
[1].each { Nginx.sleep(0.001) }
def later(x); Nginx::Async.sleep(5); x; end
Nginx.rputs send(:later, " sent")
"""))
    r = n.get("/")
    assert (r.status_code, r.text) == (200, "42 obj 10,20,30 sent")


def test_a_sleeping_request_does_not_block_the_worker(nginx):
    """/slow sleeps until /fast has been answered (at most 10 s); with a
    worker that blocks, /fast waits for /slow, which is never released."""
    gate = 'd = Nginx::SharedDict.new("gate"); '
    n = nginx("mruby_shared_dict gate 1m;\nserver {\n"
              "    listen 127.0.0.1:{port};\n"
              + loc("/slow", "mruby_content_handler_code",
                    gate + 'd["slow"] = "asleep"; '
                    '200.times { break if d["fast"]; Nginx::Async.sleep 50 }; '
                    'Nginx.rputs(d["fast"] ? "released" : "never released")')
              + loc("/fast", "mruby_content_handler_code",
                    gate + 'if d["slow"] then d["fast"] = "1"; '
                    'Nginx.rputs "while slow sleeps" '
                    'else Nginx.rputs "first" end')
              + "}\n")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(n.get, "/slow", timeout=30)
        deadline = time.monotonic() + 10
        while n.get("/fast", timeout=30).text != "while slow sleeps":
            assert time.monotonic() < deadline, "/slow never started"
            time.sleep(0.05)
        assert slow.result().text == "released"


def test_1000_concurrent_sleeping_requests_on_one_worker(nginx):
    n = nginx(loc("/", "mruby_content_handler_code",
                  'Nginx::Async.sleep 300; Nginx.rputs "z"'),
              main_conf="worker_rlimit_nofile 4096;")
    n.generate()
    port = n.port

    def one(_):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        return data

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(200) as pool:
        out = list(pool.map(one, range(1000)))
    elapsed = time.monotonic() - t0
    assert all(d.startswith(b"HTTP/1.1 200") and d.endswith(b"z")
               for d in out)
    # 1,000 x 300 ms one after another would be 300 s
    assert elapsed < 30
    assert len(n.worker_pids()) == 1


def test_a_sleep_is_never_shorter_than_asked_while_others_wake_the_worker(
        nginx):
    """nginx's timers count whole milliseconds of a clock read once per
    pass of the loop, and fire at any pass in their millisecond: a sleep
    due at 1003.7 ms whose timer is for 1003 ends 0.7 ms early when the
    loop wakes at 1003.2 for something else.  Here it keeps waking: four
    requests sleep 1-3 ms fifty times each, and a client sends requests
    one after another on a keep-alive connection meanwhile.  Each script
    times its own sleeps in whole microseconds (Time.now, the clock
    scripts have); load only makes a sleep longer.  Without the check of
    the exact deadline about half of the 200 sleeps end early."""
    n = nginx(loc("/", "mruby_content_handler_code",
                  "def us(t) t.to_i * 1_000_000 + t.usec end\n"
                  "short = 0\n"
                  "50.times do |i|\n"
                  "  ms = 1 + i % 3\n"
                  "  t = us(Time.now)\n"
                  "  Nginx::Async.sleep ms\n"
                  "  short += 1 if us(Time.now) - t < ms * 1000\n"
                  "end\n"
                  "Nginx.rputs short.to_s")
              + "location /tick { return 204; }\n")
    stop = threading.Event()

    def tick():
        with socket.create_connection(("127.0.0.1", n.port),
                                      timeout=harness.HTTP_TIMEOUT) as s:
            while not stop.is_set():
                s.sendall(b"GET /tick HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = b""
                while not answer.endswith(b"\r\n\r\n"):
                    chunk = s.recv(4096)
                    assert chunk, "nginx closed the ticking connection"
                    answer += chunk

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        ticking = pool.submit(tick)
        try:
            out = list(pool.map(lambda _: n.get("/").text, range(4)))
        finally:
            stop.set()
        ticking.result()
    assert out == ["0"] * 4


def test_an_exception_after_a_wait_is_a_500_with_file_line(nginx):
    n = nginx(loc("/", "mruby_content_handler", "{dir}/late.rb"),
              files={"late.rb": "Nginx::Async.sleep 10\n"
                                "raise ArgumentError, 'woke up wrong'\n"})
    r = n.get("/")
    assert r.status_code == 500
    assert "woke up wrong" not in r.text
    line = n.wait_log("woke up wrong")
    assert "ArgumentError" in line and "late.rb:2" in line


def test_where_a_script_cannot_wait_it_gets_a_clear_error(nginx):
    n = nginx(
        loc("/log", "mruby_log_handler_code", "sleep 0.01",
            extra="mruby_content_handler_code 'Nginx.rputs \"ok\"';")
        # read by the block's rewrite script, which runs before the block's
        # mruby_set scripts: computed inside it, where it cannot wait
        + loc("/early", "mruby_rewrite_handler_code",
              "Nginx.rputs Nginx::Var.new.v.inspect",
              extra="mruby_set $v {dir}/set.rb;"),
        files={"set.rb": "Nginx::Async.sleep 1; 'x'"})
    assert n.get("/log").text == "ok"
    line = n.wait_log("cannot wait here")
    assert "sleep: cannot wait here" in line
    assert n.get("/early").text == "nil"
    assert "Async.sleep: cannot wait here" in n.wait_log(
        "Async.sleep: cannot wait here")


def test_mruby_set_scripts_wait(nginx):
    """mruby_set and mruby_set_code scripts that wait (Nginx::Async.sleep)
    are run by their block's rewrite phase, which waits with them, before
    nginx's rewrite directives and the later phases read the variables:
    the server's and the location's, from a file and inline; the worker
    answers other requests meanwhile; a later script of the request that
    waits does not change the variable (the original's own case); a set
    script that raises after its wait leaves its variable empty."""
    n = nginx("""
mruby_set_code $srv 'Nginx::Async.sleep 10; "server"';
location /set {
    mruby_set $file {dir}/set.rb;
    mruby_set_code $code 'Nginx::Async.sleep 10; "code " + Nginx::Request.new.args.to_s';
    return 200 "$srv $file $code";
}
location /set_then_async_access {
    mruby_set_code $async_set_var_value '"original"';
    mruby_access_handler_code '
      Nginx::Async.sleep 100
      Nginx.return Nginx::DECLINED
      "clobbered"
    ';
    mruby_content_handler_code 'Nginx.rputs Nginx::Var.new.async_set_var_value';
}
location /slow {
    mruby_set_code $slow 'Nginx::Async.sleep 1500; "slow"';
    mruby_content_handler_code 'Nginx.rputs Nginx::Var.new.slow';
}
location /fast { return 200 "fast"; }
location /broken {
    mruby_set_code $broken 'Nginx::Async.sleep 10; raise "set broke late"';
    return 200 "[$broken]";
}
""", files={"set.rb": "Nginx::Async.sleep 10\n'file'\n"})
    assert n.get("/set?a").text == "server file code a"
    assert "cannot wait" not in n.error_log()

    r = n.get("/set_then_async_access")
    assert (r.status_code, r.text) == (200, "original")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(n.get, "/slow")
        time.sleep(0.3)
        assert n.get("/fast").text == "fast"
        assert not slow.done()
        assert slow.result().text == "slow"

    r = n.get("/broken")
    assert (r.status_code, r.text) == (200, "[]")
    line = [l for l in n.wait_log("set broke late").splitlines()
            if "set broke late" in l][0]
    assert "[error]" in line and "RuntimeError" in line


def pool_counts(n):
    """Coroutines alive (less /count's own) and finished stacks kept."""
    r = n.get("/count")
    live, idle = r.text.split()
    return int(live) - 1, int(idle)


def sleepers(n, count):
    """count connections whose request sleeps in /nap, once all sleep."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", n.port), timeout=5)
        s.sendall(b"GET /nap HTTP/1.1\r\nHost: x\r\n\r\n")
        socks.append(s)
    deadline = time.monotonic() + 10
    while pool_counts(n)[0] < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool_counts(n)[0] == count
    return socks


def test_a_client_that_leaves_mid_sleep_frees_its_coroutine(nginx):
    n = nginx(
        loc("/nap", "mruby_content_handler_code", """
begin
  Nginx::Async.sleep 30_000
ensure
  Nginx.errlogger Nginx::LOG_NOTICE, "nap: ensure ran"
end""")
        + loc("/count", "mruby_content_handler_code",
              'Nginx.rputs Nginx::Async.coroutines.join(" ")'))
    rss0 = harness.rss_kb(n.worker_pids()[0])

    for _ in range(3):
        socks = sleepers(n, 50)
        for s in socks:
            s.close()
        deadline = time.monotonic() + 5
        while pool_counts(n)[0] > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool_counts(n)[0] == 0

    n.wait_log("nap: ensure ran")
    assert n.error_log().count("nap: ensure ran") == 150
    # the pool keeps at most 64 finished stacks; memory does not grow
    assert pool_counts(n)[1] <= 64
    assert harness.rss_kb(n.worker_pids()[0]) - rss0 < 8 * 1024


# The pool maps its stacks MAP_NORESERVE, which /proc/PID/smaps shows as
# the flag "nr" unless the kernel never overcommits (then it ignores it).
NORESERVE_SHOWN = open("/proc/sys/vm/overcommit_memory").read().strip() != "2"


def anonymous_mappings(pid):
    """(start, end, permissions, VmFlags) of each anonymous mapping of pid
    (/proc/PID/smaps), by address."""
    rows, row = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if fields[0] == "VmFlags:":
                if row is not None:
                    rows.append(row + (set(fields[1:]),))
            elif ":" not in fields[0]:   # a mapping's first line
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                # with a path: a file, [heap], [stack]...
                row = (lo, hi, fields[1]) if len(fields) == 5 else None
    return sorted(rows)


def stack_mappings(pid, stack_size=256 * 1024, page=4096):
    """Coroutine stacks mapped in pid: an anonymous PROT_NONE guard page
    right below an anonymous read-write MAP_NORESERVE mapping of the stack
    size.  Other threads' stacks (the time budget's clock is a pthread
    under AddressSanitizer) and AddressSanitizer's heap have a guard below
    a mapping of that size too, but not MAP_NORESERVE.  The kernel merges a
    mapping with a neighbour of the same flags and protection: the first
    stack of a run of them may grow into an anonymous mapping above, the
    last guard into one below; each still counts (one side keeps its exact
    size)."""
    rows = anonymous_mappings(pid)
    return sum(1 for a, b in zip(rows, rows[1:])
               if a[2].startswith("---") and b[2].startswith("rw")
               and ("nr" in b[3] or not NORESERVE_SHOWN)
               and b[0] == a[1] and b[1] - b[0] >= stack_size
               and (a[1] - a[0] == page or b[1] - b[0] == stack_size))


# how soon after its sleepers are closed a burst's stacks are seen kept:
# the first trim comes a second after the release that passes the pool's
# 64 and keeps them all (each was taken since the trim before), the next
# a second later unmaps them
BURST_SEEN_IN_TIME = 1.5


def burst_of_sleepers(n, count):
    """count requests sleeping at once, then closed by their client: the
    most finished stacks /count saw kept while they were released, and
    whether the first reading with none left sleeping came back soon enough
    that no second trim can have run (BURST_SEEN_IN_TIME)."""
    socks = sleepers(n, count)
    assert stack_mappings(n.worker_pids()[0]) >= count

    closed = time.monotonic()
    for s in socks:
        s.close()
    most_kept = 0
    deadline = closed + 10
    while time.monotonic() < deadline:
        live, idle = pool_counts(n)
        most_kept = max(most_kept, idle)
        if live == 0:
            break
    assert live == 0
    return most_kept, time.monotonic() - closed < BURST_SEEN_IN_TIME


def stacks_trimmed_to_the_pool(n, pid):
    """No request from here on: the worker's own timer trims."""
    deadline = time.monotonic() + 15
    while stack_mappings(pid) > 64 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stack_mappings(pid) <= 64
    assert pool_counts(n) == (0, 63)   # /count's own run holds the 64th


def test_a_burst_beyond_the_pool_is_kept_a_while_then_given_back(nginx):
    """A finished coroutine's stack stays for the next request however
    many there are, until a trim (about every second) finds it unused for
    a whole period: a burst's stacks beyond the 64 the pool keeps are
    kept for at least a second, then unmapped without any request to
    trigger it.  A burst whose release this process saw too late (off the
    CPU over a second) tells nothing: tried again, three bursts at most."""
    n = nginx(
        loc("/nap", "mruby_content_handler_code", "Nginx::Async.sleep 30_000")
        + loc("/count", "mruby_content_handler_code",
              'Nginx.rputs Nginx::Async.coroutines.join(" ")'))
    pid = n.worker_pids()[0]
    for _ in range(3):
        most_kept, in_time = burst_of_sleepers(n, 150)
        if most_kept > 64 or in_time:
            break
        stacks_trimmed_to_the_pool(n, pid)
    assert most_kept > 64, ("no burst's release seen within "
                            f"{BURST_SEEN_IN_TIME} s" if not in_time else "")
    stacks_trimmed_to_the_pool(n, pid)


def test_quit_waits_for_sleeping_requests(nginx):
    n = nginx(loc("/", "mruby_content_handler_code",
                  'Nginx::Async.sleep 700; Nginx.rputs "finished"'))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        f = pool.submit(n.get, "/")
        time.sleep(0.3)
        os.kill(n.proc.pid, signal.SIGQUIT)
        r = f.result()
    assert (r.status_code, r.text) == (200, "finished")


def test_reload_lets_sleeping_requests_finish(nginx):
    n = nginx(loc("/", "mruby_content_handler_code",
                  'Nginx::Async.sleep 700; Nginx.rputs "finished"'))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        f = pool.submit(n.get, "/")
        time.sleep(0.3)
        n.reload()
        r = f.result()
    assert (r.status_code, r.text) == (200, "finished")
    assert n.get("/").text == "finished"


def test_deep_recursion_on_a_coroutine_is_a_system_stack_error(nginx):
    n = nginx(loc("/", "mruby_content_handler_code", """
class Deep
  def initialize(n); @n = n; end
  def to_s; @n == 0 ? "bottom" : "#{Deep.new(@n - 1)}"; end
end
sleep 0.001
Nginx.rputs Deep.new(100_000).to_s
""") + loc("/ok", "mruby_content_handler_code", 'Nginx.rputs "alive"'))
    pid = n.worker_pids()
    r = n.get("/")
    assert r.status_code == 500
    assert "SystemStackError" in n.wait_log("SystemStackError")
    assert n.get("/ok").text == "alive"
    assert n.worker_pids() == pid


def test_sub_request_to_proxy_pass_404_503_and_a_script(nginx):
    backend = nginx(loc("/", "mruby_content_handler_code",
                        'r = Nginx::Request.new\n'
                        'Nginx::Headers_out.new["X-Backend"] = "yes"\n'
                        'Nginx.rputs "backend #{r.uri} #{r.args}"'),
                    name="backend")
    n = nginx(
        f"location /up/ {{ proxy_pass http://127.0.0.1:{backend.port}/; }}\n"
        "location /missing { return 404; }\n"
        "location /busy { return 503; }\n"
        + loc("/script", "mruby_content_handler_code",
              'Nginx::Async.sleep 5; Nginx.rputs "from a script"')
        + loc("/", "mruby_content_handler_code", """
http = Nginx::Async::HTTP
a = http.sub_request("/up/one", "x=1")
Nginx.rputs "#{a.status} #{a.body} #{a.headers['X-Backend']}\\n"
b = http.sub_request("/up/two", {"q" => "a b&c"})
Nginx.rputs "#{b.status} #{b.body}\\n"
c = http.sub_request("/missing")
Nginx.rputs "#{c.status} #{c.body.inspect}\\n"
d = http.sub_request("/busy")
Nginx.rputs "#{d.status} #{http.last_response.status}\\n"
e = http.sub_request("/script")
Nginx.rputs "#{e.status} #{e.body}\\n"
Nginx.return(d.status == 503 ? 200 : 500)
"""))
    r = n.get("/")
    assert r.status_code == 200, n.error_log()[-2000:]
    assert r.text == ("200 backend /one x=1 yes\n"
                      "200 backend /two q=a%20b%26c\n"
                      "404 \"\"\n"
                      "503 503\n"
                      "200 from a script\n")



def test_a_failed_sub_request_has_no_body_and_the_request_goes_on(nginx):
    """A subrequest that ends in nginx's error page (a missing file): its
    status says so and its body is empty, as in the original, so a
    rewrite script that writes the body writes nothing and the request
    goes on to its next handler: a static file, or nginx's 404."""
    script = ('Nginx::Async::HTTP.sub_request "/missing"\n'
              'Nginx.rputs Nginx::Async::HTTP.last_response.body\n'
              'Nginx::Request.new.headers_out["X-Sub"] = '
              'Nginx::Async::HTTP.last_response.status.to_s')
    n = nginx(loc("/page.html", "mruby_rewrite_handler_code", script)
              + loc("/nopage.html", "mruby_rewrite_handler_code", script),
              docs={"page.html": "static page\n"})
    r = n.get("/page.html")
    assert (r.status_code, r.text, r.headers["X-Sub"]) == \
        (200, "static page\n", "404")
    r = n.get("/nopage.html")
    assert (r.status_code, r.headers["X-Sub"]) == (404, "404")
    assert "404 Not Found" in r.text

def test_sub_request_checks_its_arguments(nginx):
    n = nginx(loc("/", "mruby_content_handler_code",
                  'Nginx::Async::HTTP.sub_request("/x\\r\\nEvil: 1")'))
    assert n.get("/").status_code == 500
    assert "ArgumentError" in n.wait_log("sub_request")


def test_example_async_backends_serves_many_at_once(nginx):
    n = nginx(start=False)
    n.conf = harness.setup_example(n, "async_backends")
    n.start()
    r = n.get("/async_backends/")
    assert (r.status_code, r.text) == (200, "users: id=7\norders: user=7\n")

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        out = list(pool.map(lambda _: n.get("/async_backends/"), range(100)))
    # one after another: 100 x 250 ms = 25 s
    assert all(o.status_code == 200 for o in out)
    assert time.monotonic() - t0 < 8


DEEP = """
class Deep
  def initialize(n); @n = n; end
  def to_s; @n == 0 ? "bottom" : "#{Deep.new(@n - 1)}"; end
end
sleep 0
Nginx.rputs Deep.new(60).to_s
"""


def test_mruby_stack_size_sets_the_machine_stack_of_waiting_scripts(nginx):
    # 60 re-entries fit the default 256k, not 64k (32k kept in reserve)
    n = nginx(loc("/", "mruby_content_handler_code", DEEP))
    assert n.get("/").text == "bottom"
    small = nginx("mruby_stack_size 64k;\n"
                  "server { listen 127.0.0.1:{port};\n"
                  + loc("/", "mruby_content_handler_code", DEEP) + "}\n")
    assert small.get("/").status_code == 500
    assert "SystemStackError" in small.wait_log("SystemStackError")


def test_mruby_stack_size_out_of_range_fails_the_config_test(nginx):
    n = nginx("mruby_stack_size 1k;\n"
              "server { listen 127.0.0.1:{port}; }\n", start=False)
    rc, out = n.configtest()
    assert rc != 0 and "must be from 64k to 64m" in out


def test_stream_scripts_sleep_without_blocking_the_worker(nginx):
    from harness import read_until_closed
    stream = """
server {
    listen 127.0.0.1:{port2};
    mruby_stream_code 'Nginx::Stream::Async.sleep 300; Nginx.return(rand < 2 ? Nginx::Stream::OK : Nginx::Stream::ABORT)';
    return "slept\\n";
}
server {
    listen 127.0.0.1:{port3};
    mruby_stream_code 'sleep 0.3; Nginx.return Nginx::Stream::ABORT';
    return "never\\n";
}"""
    n = nginx(loc("/fast", "mruby_content_handler_code", 'Nginx.rputs "f"'),
              stream_conf=stream)

    def talk(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            return read_until_closed(s)

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        slow = [pool.submit(talk, n.port2) for _ in range(20)]
        denied = pool.submit(talk, n.port3)
        time.sleep(0.1)
        assert n.get("/fast").text == "f"        # the worker is free
        assert time.monotonic() - t0 < 4.0      # 20 blocking sleeps: 6 s
        assert all(f.result() == b"slept\n" for f in slow)
        assert denied.result() == b""
    assert time.monotonic() - t0 < 5.5


def test_sleep_in_post_read_and_server_rewrite(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_post_read_handler_code 'Nginx::Async.sleep 20; Nginx::Request.new.headers_in["X-A"] = "post_read"';
    mruby_server_rewrite_handler_code 'sleep 0.02; r = Nginx::Request.new; r.headers_in["X-B"] = "server_rewrite"';
    location / { mruby_content_handler_code 'h = Nginx::Request.new.headers_in; Nginx.rputs "#{h["X-A"]} #{h["X-B"]}"'; }
}""")
    t0 = time.monotonic()
    r = n.get("/")
    assert (r.status_code, r.text) == (200, "post_read server_rewrite")
    assert time.monotonic() - t0 >= 0.04


def test_sub_request_args_to_s_that_changes_the_path(nginx):
    # args.to_s runs Ruby after the path was checked: the path it sends
    # must be the one the script holds after that call, not a pointer into
    # the buffer String#replace has freed
    n = nginx(
        loc("/echo/", "mruby_content_handler_code",
            "Nginx.rputs Nginx::Request.new.uri")
        + loc("/", "mruby_content_handler_code", """
path = "/echo/" + "a" * 40
args = Object.new
args.define_singleton_method(:to_s) { path.replace("/echo/" + "b" * 60); "x=1" }
res = Nginx::Async::HTTP.sub_request(path, args)
Nginx.rputs "#{res.status} #{res.body}"
"""))
    r = n.get("/")
    assert (r.status_code, r.text) == (200, "200 /echo/" + "b" * 60), \
        n.error_log()[-2000:]


MUTEX_HOLD = r'''
d = Nginx::SharedDict.new("mruby_mutex")
m = Mutex.new(global: true, key: "k")
m.lock
d["held"] = "1"
i = 0
until d["release"] || i > 3000
  sleep 0.01
  i += 1
end
m.unlock
Nginx.rputs "held"
'''

MUTEX_WAIT = r'''
d = Nginx::SharedDict.new("mruby_mutex")
m = Mutex.new(global: true, key: "k")
d["waiting"] = "1"
m.synchronize { d["got"] = "1" }
Nginx.rputs "got it"
'''


def test_a_request_waiting_for_a_global_mutex_does_not_block_the_worker(
        nginx):
    # one worker: while /wait waits for the lock /hold has, the worker
    # still answers /state, /ping and the /release that ends the wait
    # (the lock used to block the worker until it was had: none of them
    # was answered, and /hold, suspended in sleep, never let go)
    n = nginx("""
mruby_init {dir}/init.rb;
server {
    listen 127.0.0.1:{port};
    location /hold { mruby_content_handler {dir}/hold.rb; }
    location /wait { mruby_content_handler {dir}/wait.rb; }
    location /state { mruby_content_handler_code
        'd = Nginx::SharedDict.new("mruby_mutex")
         Nginx.rputs "#{d["held"]}#{d["waiting"]}#{d["got"]}"'; }
    location /release { mruby_content_handler_code
        'Nginx::SharedDict.new("mruby_mutex")["release"] = "1"
         Nginx.rputs "released"'; }
    location /ping { mruby_content_handler_code 'Nginx.rputs "pong"'; }
}""", files={"init.rb": "Mutex.new(global: true)\n",
             "hold.rb": MUTEX_HOLD, "wait.rb": MUTEX_WAIT})

    def get(path):
        return requests.get(n.url(path), timeout=harness.HTTP_TIMEOUT)

    def state_becomes(want):
        deadline = time.monotonic() + harness.HTTP_TIMEOUT
        while time.monotonic() < deadline:
            if get("/state").text == want:
                return True
            time.sleep(0.05)
        return False

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        hold = pool.submit(get, "/hold")
        assert state_becomes("1")
        wait = pool.submit(get, "/wait")
        assert state_becomes("11")
        assert get("/ping").text == "pong"
        assert get("/state").text == "11"       # still waiting
        assert get("/release").text == "released"
        assert hold.result().text == "held"
        assert wait.result().text == "got it"
    assert get("/state").text == "111"


TOPLEVEL_SET = '''
d = Nginx::SharedDict.new("gate")
v = Nginx::Request.new.args
$tl_value = v
TL_VALUE = v
@tl_value = v
v =~ Regexp.new("(.)")
d["set-" + v] = "1"
600.times { break if d["go-" + v]; Nginx::Async.sleep 50 }
Nginx.rputs "#{$tl_value} #{TL_VALUE} #{@tl_value} #{Regexp.last_match(1)}"
'''

# /peek?NAME: whether /set?NAME has set its values, and what this request sees
TOPLEVEL_PEEK = (
    'n = Nginx::Request.new.args\n'
    'Nginx.rputs "#{Nginx::SharedDict.new("gate")["set-" + n]}|'
    '#{$tl_value.inspect} #{Object.const_defined?(:TL_VALUE)} '
    '#{@tl_value.inspect} #{Regexp.last_match.inspect}"')


def test_a_waiting_requests_top_level_state_is_its_own(nginx):
    """Two requests on one worker set the same global, top-level constant
    and top-level instance variable, each to its own value, and match a
    regexp, then sleep until released; each finds its own values after its sleep, and every
    request that set nothing, before, between and after, sees neither.
    (The isolation cleanup of every request that ended meanwhile used to
    remove what the sleeping ones had set: the first request after each
    /set saw its values, and /set failed with NameError.)"""
    n = nginx("mruby_shared_dict gate 1m;\nserver {\n"
              "    listen 127.0.0.1:{port};\n"
              + loc("/set", "mruby_content_handler_code", TOPLEVEL_SET)
              + loc("/peek", "mruby_content_handler_code", TOPLEVEL_PEEK)
              + loc("/go", "mruby_content_handler_code",
                    'Nginx::SharedDict.new("gate")['
                    '"go-" + Nginx::Request.new.args] = "1"')
              + "}\n")
    nothing = "nil false nil nil"

    def peek(name="x"):
        r = n.get("/peek?" + name, timeout=30)
        assert r.status_code == 200
        flag, seen = r.text.split("|")
        assert seen == nothing
        return flag

    def wait_set(name):
        deadline = time.monotonic() + 30
        while peek(name) != "1":
            assert time.monotonic() < deadline, f"/set?{name} never set"
            time.sleep(0.05)

    peek()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        a = pool.submit(n.get, "/set?a", timeout=60)
        wait_set("a")
        b = pool.submit(n.get, "/set?b", timeout=60)
        wait_set("b")
        n.get("/go?a", timeout=30)
        r = a.result(60)
        assert (r.status_code, r.text) == (200, "a a a a")
        assert not b.done()
        peek()
        n.get("/go?b", timeout=30)
        r = b.result(60)
        assert (r.status_code, r.text) == (200, "b b b b")
    peek()
    assert len(n.worker_pids()) == 1
