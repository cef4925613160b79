"""What a script hands to the wire or to an upstream goes through one check
(src/core/mrb_http_check.c), on both servers: header names and values,
statuses, redirect targets, URIs and query strings with CR, LF, NUL or
another control character raise ArgumentError naming the header, and
nothing of them reaches the client or a backend.  Also the Rack helper's
repeated headers, the nginx setters that read a Ruby value twice, the
arguments the header tables take, and Request.new and SharedDict.new
(made in C) with subclasses of their own."""


import pytest

SERVERS = ["apache", "nginx"]


def get_raw(server, path="/t"):
    return server.raw(f"GET {path} HTTP/1.1\r\nHost: x\r\n"
                      f"Connection: close\r\n\r\n".encode())


def content(kind, apache, nginx, script, extra=""):
    """A server whose /t runs script as its content handler."""
    if kind == "apache":
        return apache("<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n"
                      "</Location>\n" + extra, files={"t.rb": script})
    return nginx("location /t { mruby_content_handler {dir}/t.rb; }\n" + extra,
                 files={"t.rb": script})


# Every setter that reaches the wire, each with a value that would split the
# response or the request to a backend: one line per try.
SETTERS = r'''
Server = get_server_class
r = Server::Request.new
tries = [
  ["value CRLF", -> { r.headers_out["X-A"] = "a\r\nSet-Cookie: x=1" }],
  ["value LF", -> { r.headers_out["X-A"] = "a\nSet-Cookie: x=1" }],
  ["value CR", -> { r.headers_out["X-A"] = "a\rSet-Cookie: x=1" }],
  ["value NUL", -> { r.headers_out["X-A"] = "a\0b" }],
  ["value to_s", -> { o = Object.new; def o.to_s; "a\r\nSet-Cookie: x=1"; end
                      r.headers_out["X-A"] = o }],
  ["add", -> { r.headers_out.add("X-A", "a\r\nSet-Cookie: x=1") }],
  ["name space", -> { r.headers_out["X A"] = "b" }],
  ["name CRLF", -> { r.headers_out["Set-Cookie: x=1\r\nX-A"] = "b" }],
  ["name empty", -> { r.headers_out[""] = "b" }],
  ["content_type", -> { r.content_type = "text/plain\r\nSet-Cookie: x=1" }],
  ["status 100", -> { r.status = 100 }],
  ["status -1", -> { r.status = -1 }],
  ["status 600", -> { r.status = 600 }],
  ["headers_in", -> { r.headers_in["X-A"] = "a\r\nX-Smuggled: 1" }],
  ["args", -> { r.args = "a=1 HTTP/1.1\r\nX-Smuggled: 1" }],
  ["uri", -> { r.uri = "/a\r\nX-Smuggled: 1" }],
]
out = tries.map do |name, set|
  begin
    set.call
    "#{name}: accepted"
  rescue ArgumentError => e
    "#{name}: ArgumentError: #{e.message}"
  end
end
r.content_type = "text/plain"
Server.rputs out.join("\n")
'''


@pytest.mark.parametrize("kind", SERVERS)
def test_setters_refuse_what_would_split_the_response(kind, apache, nginx):
    s = content(kind, apache, nginx, SETTERS)
    resp = get_raw(s)
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), resp[:300]
    lines = body.decode().split("\n")
    assert len(lines) == 16
    for line in lines:
        assert ": ArgumentError: " in line, line
    for line in lines[:6]:
        assert "invalid value for header X-A" in line, line
    assert "invalid header name" in lines[6]
    assert "Content-Type" in lines[9]
    assert "200-599" in lines[10]
    assert b"Set-Cookie" not in head
    assert b"X-A" not in head
    assert b"X-Smuggled" not in resp


# An Array replaces every header of its name, one per element: a bad
# element anywhere raises as it would alone, and the old values stay.
ARRAY_SETTERS = r'''
r = Nginx::Request.new
out, inp = r.headers_out, r.headers_in
out["X-A"] = "old"
out.add("X-B", "old1")
out.add("X-B", "old2")
out["Content-Length"] = "2"
inp["X-In"] = "old"
tries = [
  -> { out["X-A"] = "a\r\nSet-Cookie: x=1" },
  -> { out["X-A"] = ["new", "a\r\nSet-Cookie: x=1"] },
  -> { out["X-B"] = ["new", nil, "a\0b"] },
  -> { out.add("X-B", ["new", "a\nb"]) },
  -> { out["Content-Length"] = "abc" },
  -> { out["Content-Length"] = ["3", "abc"] },
  -> { inp["X-In"] = ["new", "a\nX-Smuggled: 1"] },
]
msgs = tries.map do |set|
  begin
    set.call
    "accepted"
  rescue ArgumentError => e
    e.message
  end
end
msgs << [out["X-A"], out["X-B"], out["Content-Length"], inp["X-In"]].inspect
out.delete("Content-Length")
Nginx.rputs msgs.join("\n")
'''


def test_nginx_array_header_with_a_bad_element_keeps_the_old_values(nginx):
    n = nginx("location /t { mruby_content_handler {dir}/t.rb; }",
              files={"t.rb": ARRAY_SETTERS})
    resp = get_raw(n)
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), resp[:300]
    lines = body.decode().split("\n")
    single_a, array_a, array_b, add_b, single_cl, array_cl, array_in = \
        lines[:7]
    assert single_a.startswith("invalid value for header X-A"), single_a
    assert array_a == single_a
    assert array_b == single_a.replace("X-A", "X-B")
    assert add_b == array_b
    assert single_cl == "invalid Content-Length: abc"
    assert array_cl == single_cl
    assert array_in == single_a.replace("X-A", "X-In")
    assert lines[7] == '["old", ["old1", "old2"], "2", "old"]'
    headers = head.decode().split("\r\n")
    assert "X-A: old" in headers
    assert [h for h in headers if h.startswith("X-B")] == [
        "X-B: old1", "X-B: old2"]
    assert b"Set-Cookie" not in head


@pytest.mark.parametrize("kind", SERVERS)
def test_return_of_1xx_is_a_500_not_a_final_status(kind, apache, nginx):
    """Apache sent "100 Continue" and then the body; nginx sent nothing and
    took the client's next bytes as the next request."""
    s = content(kind, apache, nginx, '''
Server = get_server_class
Server.return Server::Request.new.args.to_i
''')
    for code in (100, 150, 199):
        resp = get_raw(s, f"/t?{code}")
        assert resp.startswith(b"HTTP/1.1 500"), resp[:200]
        assert not resp.startswith(b"HTTP/1.1 1")
    log = s.error_log()
    if kind == "apache":
        assert "returned 150, which is neither an Apache code" in log
    else:
        assert "invalid return code 150" in log


def test_nginx_send_header_status_range(nginx):
    """send_header(-1) sent "HTTP/1.1 18446744073709551615"."""
    n = nginx("""
location /t {
    mruby_content_handler_code '
        code = Nginx::Request.new.args.to_i
        begin
          Nginx.send_header code
        rescue ArgumentError => e
          Nginx.rputs e.message
        end
    ';
}""")
    for code in (-1, 0x7fffffff, 100, 1000):
        resp = get_raw(n, f"/t?{code}")
        assert resp.startswith(b"HTTP/1.1 200 OK\r\n"), resp[:200]
        assert f"invalid status {code} (a final status is 200-599)".encode() \
            in resp
    assert get_raw(n, "/t?404").startswith(b"HTTP/1.1 404")


def test_nginx_redirect_target_is_checked(nginx):
    n = nginx(r"""
location /t {
    mruby_content_handler_code '
        begin
          Nginx.redirect Nginx::Request.new.args == "a" ?
            "http://example.com/\r\nSet-Cookie: x=1" : "/x?a=1 HTTP/1.0\r\nX: 1"
        rescue ArgumentError => e
          Nginx.rputs e.message
        end
    ';
}
location /x { return 200 "x $args"; }""")
    for q in ("a", "b"):
        resp = get_raw(n, f"/t?{q}")
        assert resp.startswith(b"HTTP/1.1 200"), resp[:200]
        assert b"invalid Nginx.redirect target" in resp
        assert b"Set-Cookie" not in resp and b"x a=1" not in resp


def test_nginx_headers_in_and_args_do_not_reach_the_upstream(nginx):
    """A request header or r.args with CR LF went to proxy_pass raw."""
    n = nginx(r"""
location /header {
    mruby_rewrite_handler_code 'Nginx::Headers_in.new["X-A"] = "a\r\nX-Smuggled: 1"';
    proxy_pass http://127.0.0.1:{port}/echo;
}
location /args {
    mruby_rewrite_handler_code 'Nginx::Request.new.args = "a=1 HTTP/1.0\r\nX-Smuggled: 1\r\nX-B:"';
    proxy_pass http://127.0.0.1:{port}/echo;
}
location /echo {
    mruby_content_handler_code 'Nginx.rputs Nginx::Headers_in.new["X-Smuggled"].inspect';
}""")
    for path in ("/header", "/args"):
        r = n.get(path)
        assert r.status_code == 500, (path, r.text)
        assert "X-Smuggled" not in r.text
    log = n.error_log()
    assert "ArgumentError: invalid value for header X-A" in log
    assert "ArgumentError: invalid args=" in log


def test_apache_headers_in_do_not_reach_the_backend(apache):
    a = apache(r"""
<Location /p>
    mrubyTranslateNameMiddleCode 'r = Apache::Request.new; r.headers_in["X-A"] = "a\r\nX-Smuggled: 1"; r.reverse_proxy "http://127.0.0.1:{port}/echo"; Apache.return Apache::OK'
</Location>
<Location /echo>
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Request.new.headers_in["X-Smuggled"].inspect'
</Location>
""", modules=("proxy", "proxy_http"))
    r = a.get("/p")
    assert r.status_code == 500, r.text
    assert "X-Smuggled" not in r.text
    assert "invalid value for header X-A" in a.error_log()


def test_nginx_uri_args_reads_each_value_once(nginx):
    """A to_s that grows between two calls overflowed the buffer sized by
    the first one (the worker died with SIGSEGV)."""
    n = nginx("""
location /t {
    mruby_content_handler_code '
        $n = 0
        o = Object.new
        def o.to_s
          $n += 1
          $n == 1 ? "a" : "a" * 200000
        end
        r = Nginx::Request.new
        r.uri_args = {"k" => o, :s => 5}
        Nginx.rputs "#{$n} #{r.args}"
    ';
}""")
    for _ in range(3):
        r = n.get("/t")
        assert (r.status_code, r.text) == (200, "1 k=a&s=5")
    assert "signal" not in n.error_log()


def test_nginx_mruby_set_to_s_raising_leaves_no_trace(nginx):
    """mruby_set's value converted after the run, unprotected: the next,
    unrelated request failed with 500, and reading the variable from a
    script 100 times left nginx's variable depth at its limit ("cycle while
    evaluating variable" for every variable of the worker)."""
    n = nginx(r"""
location /bad {
    mruby_set_code $bad 'o = Object.new; def o.to_s; raise "boom"; end; o';
    return 200 "[$bad]";
}
location /read {
    mruby_set_code $bad2 'o = Object.new; def o.to_s; raise "boom"; end; o';
    mruby_content_handler_code '
        begin
          v = Nginx::Var.new.bad2
          Nginx.rputs "read #{v.inspect}"
        rescue => e
          Nginx.rputs "rescued #{e.class}"
        end
    ';
}
location /plain {
    mruby_content_handler_code 'Nginx.rputs "plain"';
}
location /var {
    return 200 "var $uri";
}""")
    n.get("/bad")
    r = n.get("/plain")
    assert (r.status_code, r.text) == (200, "plain")
    for _ in range(110):
        assert n.get("/read").status_code == 200
    r = n.get("/var")
    assert (r.status_code, r.text) == (200, "var /var")
    r = n.get("/plain")
    assert (r.status_code, r.text) == (200, "plain")
    log = n.error_log()
    assert "mruby_set: the value's to_s failed: RuntimeError: boom" in log
    assert "cycle while evaluating variable" not in log


@pytest.mark.parametrize("kind", SERVERS)
def test_client_crlf_copied_into_a_header_is_refused(kind, apache, nginx):
    """A decoded URI holds the CR LF a client sent as %0d%0a: a script that
    copies it into a header gets a 500, the client no split response."""
    s = content(kind, apache, nginx, '''
Server = get_server_class
r = Server::Request.new
r.headers_out["X-Path"] = r.uri
Server.rputs "copied"
''')
    resp = get_raw(s, "/t/a%0d%0aSet-Cookie:%20x=1")
    assert resp.startswith(b"HTTP/1.1 500"), resp[:300]
    assert b"Set-Cookie" not in resp
    assert "invalid value for header X-Path" in s.error_log()


RACK = r'''
class App
  def call(env)
    if env["QUERY_STRING"] == "bad"
      return [200, {"X-Bad" => "a\r\nSet-Cookie: x=1"}, ["bad"]]
    end
    [200, {"Content-Type" => "text/plain", "X-Multi" => "a\nb",
           "Link" => "<x>; rel=a\n<y>; rel=b"}, ["ok"]]
  end
end
run App.new
'''


@pytest.mark.parametrize("kind", SERVERS)
def test_rack_adds_each_line_of_a_header_value(kind, apache, nginx):
    """Rack joins a repeated header's values with newlines: each is sent,
    not only the last; and a CR in one is refused."""
    s = content(kind, apache, nginx, RACK)
    resp = get_raw(s)
    head = resp.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert b"X-Multi: a" in head and b"X-Multi: b" in head, head
    assert b"Link: <x>; rel=a" in head and b"Link: <y>; rel=b" in head
    resp = get_raw(s, "/t?bad")
    assert resp.startswith(b"HTTP/1.1 500"), resp[:200]
    assert b"Set-Cookie" not in resp
    assert "invalid value for header X-Bad" in s.error_log()


# Apache's default handler appends r.vlist_validator (an entity tag) to the
# ETag it sends.
VLIST = r'''
r = Apache::Request.new
begin
  r.vlist_validator = r.uri == "/bad.txt" ? "\"v\r\nX-Injected: 1\"" : "\"v1\""
rescue ArgumentError => e
  r.err_headers_out["X-Refused"] = e.message
end
'''


def test_apache_vlist_validator_is_checked_as_the_etag(apache):
    """(A CR LF in it was taken: Apache then refused its own ETag header
    and answered 500, naming no script.)"""
    a = apache("<LocationMatch \"\\.txt$\">\n    mrubyFixupsMiddle "
               "{dir}/vlist.rb\n</LocationMatch>\n",
               files={"vlist.rb": VLIST},
               docs={"ok.txt": "ok\n", "bad.txt": "bad\n"})
    r = a.get("/ok.txt")
    assert (r.status_code, r.text) == (200, "ok\n")
    assert ";v1" in r.headers["ETag"]
    resp = a.raw(b"GET /bad.txt HTTP/1.1\r\nHost: x\r\n"
                 b"Connection: close\r\n\r\n")
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), a.error_log()[-2000:]
    assert body == b"bad\n"
    assert (b"X-Refused: invalid value for header ETag (CR, LF, NUL or "
            b"another control character)") in head
    assert b"X-Injected" not in head


# The end of a script whose lambdas `tries` each answer a line: its value,
# or the class and message of what it raised.
TRY_EACH = r'''
Server.rputs(tries.map do |try|
  begin
    try.call
  rescue => e
    "#{e.class}: #{e.message}"
  end
end.join("\n"))
'''


# The header tables read their arguments themselves, without mrb_get_args:
# a name in any case, one longer than the lower-cased copy nginx's []
# compares with (64 bytes), and the errors mrb_get_args gave.
HEADER_ARGS = r'''
Server = get_server_class
r = Server::Request.new
i = r.headers_in
tries = [
  -> { [i["X-MIXED-case"], i["x-" + "l" * 70]].inspect },
  -> { r.headers_in(1) }, -> { r.headers_out(2) }, -> { i[] },
  -> { i["a", "b"] }, -> { i["Host", x: 1] },
  -> { r.headers_out["X-A", x: 1] = "1" }, -> { i[:host] },
]
''' + TRY_EACH


@pytest.mark.parametrize("kind", SERVERS)
def test_header_table_arguments(kind, apache, nginx):
    s = content(kind, apache, nginx, HEADER_ARGS)
    r = s.get("/t", headers={"x-Mixed-Case": "m", "X-" + "L" * 70: "long"})
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text.split("\n") == [
        '["m", "long"]',
        "ArgumentError: wrong number of arguments (given 1, expected 0)",
        "ArgumentError: wrong number of arguments (given 1, expected 0)",
        "ArgumentError: wrong number of arguments (given 0, expected 1)",
        "ArgumentError: wrong number of arguments (given 2, expected 1)",
        "ArgumentError: wrong number of arguments (given 2, expected 1)",
        "ArgumentError: wrong number of arguments (given 3, expected 2)",
        "TypeError: Symbol cannot be converted to String",
    ]


# Request.new and SharedDict.new are made in C: a subclass's own
# initialize still runs (with its arguments and block), and the errors of
# Class#new stay.
NEW_SCRIPT = r'''
Server = get_server_class
class Req < Server::Request
  def initialize(tag, &b)
    super()
    @tag = b.call(tag)
  end
  attr_reader :tag
end
class Dict < Server::SharedDict
  def initialize(name, start:)
    super(name)
    set("n", start)
  end
end
tries = [
  -> { r = Req.new("t") { |t| t * 2 }; [r.class, r.tag, r.uri].inspect },
  -> { d = Dict.new("cache", start: 7); [d.class, d.incr("n")].inspect },
  -> { Server::Request.new.class },
  -> { Server::Request.new(1) }, -> { Server::SharedDict.new },
  -> { Server::SharedDict.singleton_class.new },
]
''' + TRY_EACH


@pytest.mark.parametrize("kind", SERVERS)
def test_request_and_shared_dict_new(kind, apache, nginx):
    if kind == "nginx":
        s = nginx("mruby_shared_dict cache 1m;\nserver {\n    listen "
                  "127.0.0.1:{port};\n    location /t { "
                  "mruby_content_handler {dir}/t.rb; }\n}",
                  files={"t.rb": NEW_SCRIPT})
    else:
        s = content(kind, apache, nginx, NEW_SCRIPT,
                    "mrubySharedDict cache 1m\n")
    r = s.get("/t/x")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text.split("\n") == [
        '[Req, "tt", "/t/x"]',
        "[Dict, 8]",
        f"{'Apache' if kind == 'apache' else 'Nginx'}::Request",
        "ArgumentError: wrong number of arguments (given 1, expected 0)",
        "ArgumentError: wrong number of arguments (given 0, expected 1)",
        "TypeError: can't create instance of singleton class",
    ]
