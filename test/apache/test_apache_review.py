"""A second look at mod_mruby: what a script can do that the other tests
do not try.  Objects kept past their request, scripts run inside other
scripts, output after the response, error lines that must stay one line,
and scripts edited or first used while many threads run them."""

import concurrent.futures
import os
import socket

import requests

# One prefork child: one interpreter sees every request, so whatever a
# request leaves behind is there for the next one to find.
ONE_CHILD = ("StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\n"
             "ServerLimit 1\nMaxRequestWorkers 1\n")


def mruby_errors(log):
    return [line for line in log.splitlines() if "[mruby:error]" in line]


def read_all(port, request, timeout=10):
    """Sends raw bytes and reads until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def test_rputs_after_the_response_is_refused(apache):
    """A log_transaction script's rputs comes after the response's last
    chunk: it must raise, not put bytes on the keep-alive connection in
    front of the next response."""
    a = apache("""
<Location /c>
    mrubyHandlerMiddleCode 'Apache.rputs "b" * 100000'
    mrubyLogTransactionMiddleCode 'Apache.rputs "AFTER" * 10000'
</Location>
""")
    out = read_all(a.port, b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
                           b"GET /c HTTP/1.1\r\nHost: x\r\n"
                           b"Connection: close\r\n\r\n")
    assert b"AFTER" not in out
    # the second response starts right after the first one's last chunk
    first, sep, second = out.partition(b"\r\n0\r\n\r\n")
    assert sep and first.startswith(b"HTTP/1.1 200")
    assert second.startswith(b"HTTP/1.1 200")
    a.wait_log("mrubyLogTransactionMiddle: RuntimeError: rputs: the "
               "response can no longer take a body")


KEEP_INIT = """\
$kept = {
  "request" => Apache::Request.new,
  "headers_in" => Apache::Headers_in.new,
  "notes" => Apache::Notes.new,
  "connection" => Apache::Connection.new,
  "finfo" => Apache::Finfo.new,
}
KEPT = []
{ "request" => -> { $kept["request"].uri },
  "headers_in" => -> { $kept["headers_in"]["Host"] },
  "notes" => -> { $kept["notes"]["n"] = "x" },
  "connection" => -> { $kept["connection"].remote_ip },
  "finfo" => -> { $kept["finfo"].size },
}.each do |name, use|
  begin
    use.call
    Apache.errlogger Apache::APLOG_NOTICE, "kept #{name}: no error"
  rescue RuntimeError => e
    Apache.errlogger Apache::APLOG_NOTICE, "kept #{name}: #{e.message}"
  end
end
"""

# Stores run-bound objects (and a closure over them) in the startup
# constant KEPT, during an output filter run and an authn run.
KEEP_FILTER = """\
f = Apache::Filter.new
r = Apache::Request.new
KEPT << f << Proc.new { r.uri + " " + r.headers_in["X-Id"].to_s }
"""

KEEP_AUTHN = """\
KEPT << Apache::AuthnProvider.new
Apache.return Apache::AuthnProvider::AUTH_GRANTED
"""

USE_KEPT = """\
out = []
out << $kept["request"].uri
out << $kept["headers_in"]["X-Id"].to_s
$kept["notes"]["n"] = "set"
out << Apache::Request.new.notes["n"]
out << KEPT[1].call
[KEPT[0], KEPT[2]].each do |obj|
  begin
    obj.respond_to?(:body) ? obj.body : obj.user
    out << "no error"
  rescue RuntimeError => e
    out << e.message
  end
end
Apache.rputs out.join("|")
"""


def test_objects_kept_past_their_request(apache):
    """Request, tables, Filter and AuthnProvider objects hold no pointer to
    the request they were made in: kept in a startup global or constant,
    they reach the request running now, and raise a clear error where there
    is no such request or run -- never a crash of the worker."""
    a = apache("""
mrubyChildInitMiddle {dir}/init.rb
<Location /f>
    mrubyOutputFilter {dir}/filter.rb
    SetOutputFilter mruby
</Location>
<Location /auth>
    AuthType Basic
    AuthName "kept"
    AuthBasicProvider mruby
    mrubyAuthnCheckPassword {dir}/authn.rb
    Require valid-user
</Location>
<Location /use>
    mrubyHandlerMiddle {dir}/use.rb
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD,
        files={"init.rb": KEEP_INIT, "filter.rb": KEEP_FILTER,
               "authn.rb": KEEP_AUTHN, "use.rb": USE_KEPT},
        docs={"f": "filtered", "auth": "authed"})
    for name in ("request", "headers_in", "notes", "connection", "finfo"):
        a.wait_log(f"kept {name}: no request: called outside a request")
    pid = a.worker_pids()
    assert a.get("/f", headers={"X-Id": "first"}).text == "filtered"
    assert a.get("/auth", auth=("u", "p")).text == "authed"
    for n in range(3):
        r = a.get("/use", headers={"X-Id": f"now{n}"})
        assert r.status_code == 200, a.error_log()[-2000:]
        assert r.text == "|".join([
            "/use", f"now{n}", "set", f"/use now{n}",
            "Apache::Filter is only available in an mrubyOutputFilter or "
            "mrubyInputFilter script",
            "Apache::AuthnProvider is only available in a script run as a "
            "mruby authn provider"])
    assert a.worker_pids() == pid
    assert mruby_errors(a.error_log()) == []


def test_blocks_kept_past_their_script_keep_their_variables(apache):
    """A block made at the top level of a script and kept (in a startup
    constant) still sees that script's variables after the script ended,
    after other scripts reused the VM stack, after the stack grew and after
    garbage collection; a child_init block keeps counting its own counter."""
    a = apache("""
mrubyChildInitMiddleCode 'KEPT = []; counter = 0; COUNT = -> { counter += 1 }'
<Location /keep>
    mrubyHandlerMiddleCode 'g = "kept value"; n = 42; KEPT << Proc.new { "#{g} #{n}" }; Apache.rputs "kept"'
</Location>
<Location /deep>
    mrubyHandlerMiddleCode 'def deep(n, a, b, c, d, e, f, g); n == 0 ? 0 : 1 + deep(n - 1, a, b, c, d, e, f, g); end; x = "other"; y = [1, 2]; Apache.rputs deep(300, 1, 2, 3, 4, 5, 6, 7).to_s'
</Location>
<Location /call>
    mrubyHandlerMiddleCode 'junk = Array.new(500) { |i| "junk" * i }; GC.start; Apache.rputs KEPT.map(&:call).inspect + " " + COUNT.call.to_s'
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD)
    assert a.get("/keep").text == "kept"
    assert a.get("/call").text == '["kept value 42"] 1'
    assert a.get("/deep").text == "300"
    assert a.get("/call").text == '["kept value 42"] 2'
    assert a.get("/keep").text == "kept"
    assert a.get("/call").text == '["kept value 42", "kept value 42"] 3'
    assert mruby_errors(a.error_log()) == []


NESTED_FILTER = """\
$from_filter = "global"
FROM_FILTER = "constant"
@from_filter = "ivar"
f = Apache::Filter.new
raise "filter broke" if f.body == "bad"
f.body = f.body.upcase
"""

NESTED_HANDLER = """\
r = Apache::Request.new
begin
  body = r.body
rescue RuntimeError => e
  body = "rescued: #{e.message}"
end
Apache.rputs [body, $from_filter, Object.const_defined?(:FROM_FILTER),
              @from_filter].inspect
"""

LEFT_BEHIND = """\
Apache.rputs [$from_filter, Object.const_defined?(:FROM_FILTER),
  Apache::Request.const_defined?(:FROM_FILTER), @from_filter].inspect
"""


def test_script_run_inside_another_is_still_top_level(apache):
    """An input filter script runs inside the handler script that reads
    r.body, in an interpreter of its own (the handler's is not idle): the
    handler does not see what the filter set, its top-level constants go to
    Object like any script's (not into Apache::Request, whose method was
    running), everything it set is gone after the request, and its error
    reaches the outer script as an exception it can rescue."""
    a = apache("""
<Location /in>
    mrubyInputFilter {dir}/in.rb
    SetInputFilter mruby
    mrubyHandlerMiddle {dir}/handler.rb
</Location>
<Location /left>
    mrubyHandlerMiddle {dir}/left.rb
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD,
        files={"in.rb": NESTED_FILTER, "handler.rb": NESTED_HANDLER,
               "left.rb": LEFT_BEHIND})
    nothing = '[nil, false, false, nil]'
    assert a.get("/left").text == nothing
    for _ in range(2):
        r = a.post("/in", data=b"abc")
        assert r.text == '["ABC", nil, false, nil]'
        assert a.get("/left").text == nothing
    r = a.post("/in", data=b"bad")
    assert r.status_code == 200
    assert r.text == ('["rescued: error reading the request body '
                      '(HTTP status 500)", '
                      'nil, false, nil]')
    assert a.get("/left").text == nothing
    line, = mruby_errors(a.wait_log("filter broke"))
    assert "mrubyInputFilter: RuntimeError: filter broke" in line
    assert f"{a.dir}/in.rb:5" in line


def test_error_line_stays_one_line(apache):
    """Newlines in a message are escaped; a NUL byte does not cut off the
    rest of the line and its file:line; an exception whose message method
    itself raises is still named."""
    a = apache("""
<Location /nl>
    mrubyHandlerMiddleCode 'raise "first\\nsecond\\r\\nthird"'
</Location>
<Location /nul>
    mrubyHandlerMiddle {dir}/nul.rb
</Location>
<Location /msg>
    mrubyHandlerMiddle {dir}/msg.rb
</Location>
""", files={"nul.rb": 'raise ArgumentError, "bad\\0byte, after NUL"\n',
           "msg.rb": """\
class OddError < StandardError
  def message
    raise "no message today"
  end
end
raise OddError
"""})
    assert a.get("/nl").status_code == 500
    assert a.get("/nul").status_code == 500
    assert a.get("/msg").status_code == 500
    log = a.wait_log("OddError")
    lines = mruby_errors(log)
    assert len(lines) == 3, lines
    nul = lines.pop(1)
    assert "ArgumentError: bad" in nul
    assert "byte, after NUL" in nul and f"{a.dir}/nul.rb:1" in nul
    # (Apache escapes the backslash of the core's "\\n" once more)
    assert "RuntimeError: first\\" in lines[0]
    assert "second\\" in lines[0] and "third (" in lines[0]
    assert "mrubyHandlerMiddle: OddError: " in lines[1]
    assert f"{a.dir}/msg.rb:6" in lines[1]


def test_stat_script_edited_while_threads_run_it(apache):
    """Every thread of the event MPM runs a `stat` script while it is
    rewritten: each answer is one whole version, none fails, and the last
    version is what every thread serves in the end."""
    a = apache("<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>",
               mpm="event", files={"e.rb": 'Apache.rputs "version 0"'})
    versions = 12
    fetch = lambda _: requests.get(a.url("/e"), timeout=30)
    seen = set()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        for v in range(1, versions + 1):
            pending = [pool.submit(fetch, i) for i in range(32)]
            # written aside and renamed in, as editors do: a reader never
            # meets a half-written file
            tmp = a.write("e.rb.new", f'Apache.rputs "version {v}"')
            os.rename(tmp, os.path.join(a.dir, "e.rb"))
            for f in pending:
                r = f.result()
                assert r.status_code == 200, a.error_log()[-2000:]
                seen.add(r.text)
        # each child serves the last version once its watcher thread has
        # read the rename (docs/apache.md)
        a.get_spread_edited("/e", f"version {versions}")
        last = [r.text for r in pool.map(fetch, range(64))]
    assert seen <= {f"version {v}" for v in range(versions + 1)}
    assert last == [f"version {versions}"] * 64
    assert mruby_errors(a.error_log()) == []


def test_many_handler_scripts_first_used_at_once(apache):
    """mruby-script files met for the first time by many threads at once:
    each is compiled once per process and each answers for itself."""
    n = 40
    a = apache("""
<Location /run/>
    SetHandler mruby-script
    mrubyHandlerEnable On
</Location>
<Location /cached/>
    SetHandler mruby-script
    mrubyHandlerEnable On
    mrubyCodeCache forever
</Location>
""", mpm="event",
        docs={**{f"run/s{i}.rb": f'Apache.rputs "script {i}"'
                 for i in range(n)},
              **{f"cached/s{i}.rb": f'Apache.rputs "cached {i}"'
                 for i in range(n)}})
    paths = [f"/run/s{i}.rb" for i in range(n)] + \
            [f"/cached/s{i}.rb" for i in range(n)]
    fetch = lambda p: requests.get(a.url(p), timeout=30).text
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        got = list(pool.map(fetch, paths * 2))
    want = [f"script {i}" for i in range(n)] + \
           [f"cached {i}" for i in range(n)]
    assert got == want * 2
    assert mruby_errors(a.error_log()) == []


PHASES_ADDED = """
mrubyPostReadRequestFirstCode 'Apache::Request.new.notes["prr"] = "1"'
<Location /r>
    mrubyAccessCheckerLastCode 'Apache.return Apache::HTTP_FORBIDDEN if Apache::Request.new.args == "deny"'
    mrubyFixupsFirstCode 'r = Apache::Request.new; r.headers_out["X-Fixups"] = r.notes["prr"].to_s'
    mrubyLogTransactionLastCode 'Apache.errlogger Apache::APLOG_NOTICE, "logged #{Apache::Request.new.args}"'
</Location>
"""


def test_restart_adds_and_drops_phases(apache):
    """Phases a configuration did not use start running after a graceful
    restart that adds them, and stop after one that takes them away."""
    handler = "<Location /r>\nmrubyHandlerMiddleCode 'Apache.rputs \"h\"'\n</Location>\n"
    a = apache(handler)
    r = a.get("/r?deny")
    assert (r.status_code, r.text, "X-Fixups" in r.headers) == (200, "h", False)
    for n, restart in enumerate((a.graceful, a.restart)):
        a.conf = handler + PHASES_ADDED
        restart()
        assert a.get("/r?deny").status_code == 403
        r = a.get(f"/r?ok{n}")
        assert (r.text, r.headers.get("X-Fixups")) == ("h", "1")
        a.wait_log(f"logged ok{n}")
        a.conf = handler
        restart()
        r = a.get("/r?deny")
        assert (r.status_code, "X-Fixups" in r.headers) == (200, False)


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def test_output_filter_limit_stops_reading_a_large_file(apache):
    """A static file comes to the filter as one brigade: past
    mrubyOutputFilterLimit the filter stops reading it there, rather than
    copying the whole file into memory and only then answering 500."""
    size = 48 << 20
    s = apache("""
<Location /f/>
    mrubyOutputFilterLimit 4096
    mrubyOutputFilter {dir}/f.rb
    SetOutputFilter mruby
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD,
        files={"f.rb": "f = Apache::Filter.new; f.body = f.body.upcase"},
        docs={"f/small": "x" * 100, "f/big": "x" * size})
    assert s.get("/f/small").text == "X" * 100
    (child,) = s.worker_pids()
    before = vm_hwm_kib(child)
    assert s.get("/f/big").status_code == 500
    grown = vm_hwm_kib(child) - before
    assert grown < (size >> 10) // 2, f"the child grew by {grown} KiB"
