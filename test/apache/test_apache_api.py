"""The Ruby API of mod_mruby, class by class, through real requests."""

import json
import os
import socket

import pytest

import harness


def handler(apache, code, path="/t", extra="", **kw):
    """An Apache whose handler at path is the file script t.rb."""
    files = dict(kw.pop("files", {}))
    files["t.rb"] = code
    return apache(f"<Location {path}>\n    mrubyHandlerMiddle {{dir}}/t.rb\n"
                  f"</Location>\n{extra}", files=files, **kw)


# The script prints a JSON object of what it read (mruby has no JSON: build
# it from inspect, which quotes strings the same way for plain text).
def as_json(pairs):
    return ("Apache.rputs \"{\" + [" + ", ".join(
        f'"\\"{k}\\": " + ({v}).inspect' for k, v in pairs) +
        "].join(\", \") + \"}\"")


def from_json(text):
    return json.loads(text.replace(": nil", ": null"))


def test_request_read_attributes(apache):
    pairs = [
        ("the_request", "r.the_request"), ("protocol", "r.protocol"),
        ("unparsed_uri", "r.unparsed_uri"), ("uri", "r.uri"),
        ("args", "r.args"), ("method", "r.method"),
        ("hostname", "r.hostname"), ("filename", "r.filename"),
        ("path_info", "r.path_info"), ("document_root", "r.document_root"),
        ("scheme", "r.scheme"), ("proto_num", "r.proto_num"),
        ("method_number", "r.method_number"),
        ("header_only", "r.header_only"), ("user", "r.user"),
        ("handler", "r.handler"), ("main", "r.main?"),
        ("sub_request", "r.sub_request?"), ("prev", "r.prev?"),
        ("internal_redirect", "r.internal_redirect?"),
        ("proxyreq", "r.proxyreq"), ("status", "r.status"),
        ("content_length", "r.content_length"),
        ("request_time_recent", "(Time.now.to_f - r.request_time).abs < 60"),
        ("response_time_small", "r.response_time >= 0 && "
                                "r.response_time < 60"),
        ("proxyreq_none", "r.proxyreq == Apache::PROXYREQ_NONE"),
        ("m_get", "r.method_number == Apache::M_GET"),
    ]
    a = handler(apache, "r = Apache::Request.new\n" + as_json(pairs),
                path="/t/")
    r = a.get("/t/x/y?a=1&b=2")
    assert r.status_code == 200, a.error_log()[-2000:]
    got = from_json(r.text)
    assert got == {
        "the_request": "GET /t/x/y?a=1&b=2 HTTP/1.1",
        "protocol": "HTTP/1.1",
        "unparsed_uri": "/t/x/y?a=1&b=2",
        "uri": "/t/x/y",
        "args": "a=1&b=2",
        "method": "GET",
        "hostname": "127.0.0.1",
        "filename": os.path.join(a.docroot, "t"),
        "path_info": "/x/y",
        "document_root": a.docroot,
        "scheme": "http",
        "proto_num": 1001,
        "method_number": 0,
        "header_only": 0,
        "user": None,
        "handler": "",
        "main": False,
        "sub_request": False,
        "prev": False,
        "internal_redirect": False,
        "proxyreq": 0,
        "status": 200,
        "content_length": 0,
        "request_time_recent": True,
        "response_time_small": True,
        "proxyreq_none": True,
        "m_get": True,
    }


def test_request_write_attributes(apache):
    """Every writable attribute reads back what was written."""
    fields = ["the_request", "protocol", "user", "ap_auth_type",
              "unparsed_uri", "uri", "filename", "canonical_filename",
              "path_info", "args", "hostname", "status_line", "range",
              "handler", "content_encoding"]
    code = "r = Apache::Request.new\n"
    code += "".join(f'r.{f} = "v-{f}"\n' for f in fields)
    code += 'r.document_root = "/srv/other"\n'
    code += 'r.method = "POST"\n'
    code += 'r.content_type = "text/x-test"\n'
    code += "r.proxyreq = Apache::PROXYREQ_NONE\n"
    code += "got = [" + ", ".join(f"r.{f}" for f in fields) + "]\n"
    code += "got += [r.document_root, r.method, r.method_number, r.content_type, r.proxyreq]\n"
    code += "r.args = nil\ngot << r.args\n"
    code += 'Apache.rputs got.join("|")\n'
    # the real response comes from a handler that has not touched them
    a = handler(apache, code)
    r = a.get("/t")
    assert r.status_code == 200, a.error_log()[-2000:]
    assert r.text == "|".join([f"v-{f}" for f in fields] +
                              ["/srv/other", "POST", "2", "text/x-test",
                               "0", ""])
    assert r.headers["Content-Type"] == "text/x-test"


def test_request_status_and_content_length(apache):
    a = handler(apache, """\
r = Apache::Request.new
r.status = 202
r.status_line = "202 Taken"
r.content_type = "text/plain"
r.content_length = 5
Apache.rputs "12345"
""")
    r = a.get("/t")
    assert r.status_code == 202
    assert r.reason == "Taken"
    assert r.headers["Content-Length"] == "5"
    assert r.text == "12345"


def test_request_body(apache):
    """r.body: read once, kept for the other scripts of the request."""
    a = apache("""
<Location /body>
    mrubyFixupsMiddleCode 'Apache::Request.new.notes["early"] = Apache::Request.new.body.size.to_s'
    mrubyHandlerMiddleCode 'r = Apache::Request.new; Apache.rputs "#{r.notes["early"]}:#{r.body}"'
</Location>
""")
    r = a.post("/body", data=b"hello body")
    assert r.text == "10:hello body"
    big = bytes(range(256)) * 1024          # 256 KB, every byte value
    r = a.post("/body", data=big)
    assert r.content == b"262144:" + big
    # chunked request body
    r = a.post("/body", data=iter([b"ab", b"cd", b"ef"]))
    assert r.text == "6:abcdef"
    assert a.get("/body").text == "0:"


def test_reverse_proxy_sets_up_mod_proxy(apache):
    backend = apache("""
<Location /be>
    mrubyHandlerMiddleCode 'r = Apache::Request.new; Apache.rputs "backend #{r.uri} #{r.args} #{r.headers_in["X-Forwarded-Host"]}"'
</Location>
""")
    front = apache("""
<Location /fe/>
    mrubyTranslateNameMiddleCode 'r = Apache::Request.new; r.reverse_proxy("http://127.0.0.1:BACKEND/be" + r.uri[3..-1] + (r.uri.end_with?("q") ? "?replaced=1" : "")); Apache.return Apache::OK'
</Location>
<Location /fe/show/>
    mrubyTranslateNameMiddleCode 'r = Apache::Request.new; r.reverse_proxy("http://x/y?z"); Apache.rputs "#{r.filename} #{r.proxyreq} #{r.handler} #{r.args}"; Apache.return Apache::DONE'
</Location>
""".replace("BACKEND", str(backend.port)), modules=("proxy_http",))
    r = front.get("/fe/a/b?orig=1")
    assert r.text == f"backend /be/a/b orig=1 127.0.0.1:{front.port}"
    r = front.get("/fe/q?orig=1")
    assert r.text == f"backend /be/q replaced=1 127.0.0.1:{front.port}"
    assert front.get("/fe/show/").text == \
        "proxy:http://x/y 2 proxy-server z"


TABLES = ["headers_in", "headers_out", "err_headers_out", "notes",
          "subprocess_env"]


def test_tables_get_set_delete_all(apache):
    code = "r = Apache::Request.new\nout = []\n"
    for t in TABLES:
        code += f"""
t = r.{t}
t["X-A"] = "1"
t["X-B"] = "2"
t.delete "X-B"
t.add "X-C", "3"
out << "{t}:#{{t["X-A"]}}:#{{t["x-a"]}}:#{{t["X-B"].inspect}}:#{{t.all["X-C"]}}"
"""
    code += 'r.content_type = "text/plain"\nApache.rputs out.join("\\n")\n'
    a = handler(apache, code)
    r = a.get("/t")
    assert r.status_code == 200, a.error_log()[-2000:]
    assert r.text.split("\n") == [f"{t}:1:1:nil:3" for t in TABLES]
    assert r.headers["X-A"] == "1, 1"   # headers_out and err_headers_out
    assert r.headers["X-C"] == "3, 3"
    assert "X-B" not in r.headers


def test_table_classes_and_all(apache):
    a = handler(apache, """\
hin = Apache::Headers_in.new
all = hin.all
Apache::Headers_out.new["X-Out"] = "o"
Apache::Notes.new["n"] = "note"
Apache.rputs [all.class, all["X-Mine"], hin["x-mine"],
              Apache::Notes.new["n"], Apache::Request.new.notes["n"],
              Apache::Request.new.headers_in.class].join(",")
""")
    r = a.get("/t", headers={"X-Mine": "mine"})
    assert r.text == "Hash,mine,mine,note,note,Apache::Headers_in"
    assert r.headers["X-Out"] == "o"


def test_set_cookie_adds(apache):
    a = handler(apache, """\
h = Apache::Request.new.headers_out
h["Set-Cookie"] = "a=1"
h["Set-Cookie"] = "b=2"
h["X-Once"] = "1"
h["X-Once"] = "2"
""")
    r = a.get("/t")
    cookies = [v for k, v in r.raw.headers.items() if k == "Set-Cookie"]
    assert cookies == ["a=1", "b=2"]
    assert r.headers["X-Once"] == "2"
    assert r.cookies["a"] == "1" and r.cookies["b"] == "2"


def test_binary_header_values(apache):
    """Bytes 0x80-0xff pass through headers_in and headers_out unchanged."""
    a = handler(apache, """\
r = Apache::Request.new
v = r.headers_in["X-Bin"]
r.headers_out["X-Echo"] = v
r.content_type = "application/octet-stream"
Apache.rputs "#{v.bytesize}:" + v
""")
    value = bytes(range(0x80, 0x100)) + b"\tok!"
    resp = a.raw(b"GET /t HTTP/1.1\r\nHost: x\r\nX-Bin: " + value +
                 b"\r\nConnection: close\r\n\r\n")
    head, _, body = resp.partition(b"\r\n\r\n")
    assert b"\r\nX-Echo: " + value + b"\r\n" in head + b"\r\n"
    assert body == str(len(value)).encode() + b":" + value


def test_null_byte_is_refused(apache):
    a = handler(apache, """\
[-> { Apache::Request.new.headers_out["X-Nul"] = "a\\0b" },
 -> { Apache::Request.new.notes["nul"] = "a\\0b" }].each do |set|
  begin
    set.call
    Apache.rputs "accepted\n"
  rescue ArgumentError => e
    Apache.rputs "refused: #{e.message}\n"
  end
end
""")
    assert a.get("/t").text == (
        "refused: invalid value for header X-Nul (CR, LF, NUL or another "
        "control character)\n"
        "refused: string contains a null byte\n")


def test_long_header_values(apache):
    """A 16 KB header value in and out (LimitRequestFieldSize raised)."""
    a = handler(apache, """\
r = Apache::Request.new
v = r.headers_in["X-Long"]
r.headers_out["X-Long-Echo"] = v.reverse
Apache.rputs v.size.to_s
""", extra="LimitRequestFieldSize 20000")
    value = "".join(chr(ord("a") + i % 26) for i in range(16384))
    r = a.get("/t", headers={"X-Long": value})
    assert r.text == "16384"
    assert r.headers["X-Long-Echo"] == value[::-1]


def test_binary_body_through_rputs(apache):
    a = handler(apache, """\
s = ""
256.times { |i| s << i.chr }
Apache::Request.new.content_type = "application/octet-stream"
Apache.rputs s * 64
Apache.echo "end"
""")
    r = a.get("/t")
    assert r.content == bytes(range(256)) * 64 + b"end\n"


def test_server(apache):
    pairs = [("hostname", "s.hostname"), ("admin", "s.admin"),
             ("port", "s.port"), ("timeout", "s.timeout"),
             ("keep_alive", "s.keep_alive"),
             ("keep_alive_timeout", "s.keep_alive_timeout"),
             ("keep_alive_max", "s.keep_alive_max"),
             ("is_virtual", "s.is_virtual"),
             ("document_root", "s.document_root"),
             ("error_fname", "s.error_fname"),
             ("loglevel", "s.loglevel"),
             ("limit_req_fieldsize", "s.limit_req_fieldsize"),
             ("server_hostname", "s.server_hostname")]
    # loglevel: the number of the level the server logs at (info: 6)
    a = handler(apache, "s = Apache::Server.new\n" + as_json(pairs),
                loglevel="info")
    got = from_json(a.get("/t").text)
    assert got == {
        "hostname": "127.0.0.1", "admin": "root@localhost", "port": 0,
        "timeout": 30000000, "keep_alive": 1, "keep_alive_timeout": 5000000,
        "keep_alive_max": 0, "is_virtual": 0, "document_root": a.docroot,
        "error_fname": f"{a.logs}/error.log", "loglevel": 6,
        "limit_req_fieldsize": 8190, "server_hostname": "127.0.0.1"}


def test_server_of_a_virtual_host(apache):
    a = handler(apache, 'Apache.rputs "#{Apache::Server.new.hostname} '
                '#{Apache::Server.new.is_virtual}"', extra="""
<VirtualHost 127.0.0.1:{port}>
    ServerName vhost.example
    <Location /t>
        mrubyHandlerMiddle {dir}/t.rb
    </Location>
</VirtualHost>
""")
    assert a.get("/t", headers={"Host": "vhost.example"}).text == \
        "vhost.example 1"


def test_connection(apache):
    pairs = [("remote_ip", "c.remote_ip"), ("local_ip", "c.local_ip"),
             ("local_port", "c.local_port"),
             ("remote_port", "c.remote_port"),
             ("keepalives", "c.keepalives"), ("aborted", "c.aborted?"),
             ("remote_host", "c.remote_host")]
    a = handler(apache, "c = Apache::Connection.new\n" + as_json(pairs))
    s = socket.create_connection(("127.0.0.1", a.port))
    try:
        port = s.getsockname()[1]
        s.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        resp = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            resp += d
    finally:
        s.close()
    got = from_json(resp.partition(b"\r\n\r\n")[2].decode())
    assert got == {"remote_ip": "127.0.0.1", "local_ip": "127.0.0.1",
                   "local_port": a.port, "remote_port": port,
                   "keepalives": 0, "aborted": False, "remote_host": None}


def test_connection_keepalives_count(apache):
    a = handler(apache, "Apache.rputs Apache::Connection.new.keepalives.to_s")
    # one keep-alive connection: the count grows with each request on it
    assert [a.get("/t").text for _ in range(3)] == ["0", "1", "2"]


def test_env(apache):
    a = handler(apache, """\
e = Apache::Env.new
e["MY_VAR"] = "mine"
all = e.all
Apache.rputs [e["REQUEST_METHOD"], e["QUERY_STRING"], e["SCRIPT_NAME"],
              e["SERVER_PORT"], e["REMOTE_ADDR"], e["FROM_SETENV"],
              e["MY_VAR"], all["HTTP_X_FOO"], all.key?("PATH_INFO")].inspect
""", extra="SetEnv FROM_SETENV yes")
    r = a.get("/t?q=1", headers={"X-Foo": "bar"})
    assert r.text == (f'["GET", "q=1", "/t", "{a.port}", "127.0.0.1", '
                      '"yes", "mine", "bar", false]')


def test_finfo(apache):
    a = handler(apache, """\
f = Apache::Request.new.finfo
Apache.rputs [f.size, f.file?, f.directory?, f.exist?, f.filetype == Apache::Finfo::APR_REG,
              f.mode & 0777, f.mtime > 1000000000, f.fname,
              Apache::Finfo.new.size].inspect
""", path="/file.txt", docs={"file.txt": "12345"})
    os.chmod(os.path.join(a.docroot, "file.txt"), 0o640)
    # the stat is per request: change the mode before asking
    r = a.get("/file.txt")
    assert r.text == (f'[5, true, false, true, true, {0o640}, true, '
                      f'"{a.docroot}/file.txt", 5]')


def test_sleep_refuses_what_is_not_a_duration(apache):
    """NaN and values too large for a microsecond count were converted to
    an integer anyway (undefined behaviour; NaN slept for nothing)."""
    a = handler(apache, """\
out = [Float::NAN, -1, 1e300, Float::INFINITY, 86401].map do |v|
  begin
    Apache.sleep(v)
    "slept"
  rescue ArgumentError => e
    e.message
  end
end
Apache.rputs out.join("\\n")
""")
    r = a.get("/t")
    assert r.status_code == 200, a.error_log()[-2000:]
    lines = r.text.split("\n")
    assert len(lines) == 5
    for line in lines:
        assert line.startswith("sleep: ") and line.endswith(
            " is not a number of seconds from 0 to 86400"), lines


def test_apache_class_methods(apache):
    a = handler(apache, """\
Apache.rputs [Apache.module_name, Apache.module_version, Apache.server_version,
              Apache.server_build, server_name, get_server_class.to_s,
              Apache.sleep(0), Apache.sleep(0.01)].inspect
Apache.syslogger Apache::LOG_DEBUG, "mod_mruby test syslogger"
Apache.errlogger Apache::APLOG_WARNING, "errlogger line"
Apache.log Apache::LOG_NOTICE, "log line"
Apache::Request.new.log Apache::APLOG_ERR, "request log line"
""")
    r = a.get("/t")
    out = r.text
    assert out.startswith('["mod_mruby", "1.0.0", "Apache/2.4')
    assert '"Apache", "Apache", 0, 0]' in out
    log = a.wait_log("request log line")
    assert "[mruby:warn]" in log and "errlogger line" in log
    assert "[mruby:notice]" in log and "log line" in log
    assert "[mruby:error]" in log and "[client 127.0.0.1:" in log


def test_constants(apache):
    a = handler(apache, """\
A = Apache
Apache.rputs [A::OK, A::DECLINED, A::DONE, A::HTTP_OK, A::HTTP_MOVED_TEMPORARILY,
  A::HTTP_FORBIDDEN, A::HTTP_NOT_FOUND, A::HTTP_SERVICE_UNAVAILABLE,
  A::HTTP_NETWORK_AUTHENTICATION_REQUIRED, A::HTTP_CONTINUE,
  A::APLOG_EMERG, A::APLOG_DEBUG, A::LOG_ERR, A::LOG_WARN, A::LOG_WARNING,
  A::M_GET, A::M_POST, A::M_INVALID, A::PROXYREQ_REVERSE,
  A::AUTH_GRANTED, A::AuthnProvider::AUTH_DENIED,
  A::AuthnProvider::AUTH_USER_NOT_FOUND, A::AuthnProvider::AUTH_GENERAL_ERROR].inspect
""")
    assert a.get("/t").text == ("[0, -1, -2, 200, 302, 403, 404, 503, 511, "
                                "100, 0, 7, 3, 4, 4, 0, 2, 26, 2, 1, 0, 3, 4]")


def test_request_outside_a_request_raises(apache):
    """In post_config there is no request: Request.new's methods raise,
    Server.new is the main server."""
    a = apache("""
mrubyPostConfigMiddleCode 'begin; Apache::Request.new.uri; rescue => e; Apache.errlogger Apache::APLOG_NOTICE, "outside: #{e.class}: #{e.message}"; end; Apache.errlogger Apache::APLOG_NOTICE, "server: #{Apache::Server.new.hostname}"'
""")
    log = a.wait_log("server: 127.0.0.1")
    assert "outside: RuntimeError: no request: called outside a request" in log


def test_filter_and_authn_classes_outside_their_runs(apache):
    a = handler(apache, """\
out = []
[-> { Apache::Filter.new.body }, -> { Apache::AuthnProvider.new.user }].each do |f|
  begin
    f.call
    out << "no error"
  rescue RuntimeError => e
    out << e.message
  end
end
Apache.rputs out.join("\\n")
""")
    assert a.get("/t").text == (
        "Apache::Filter is only available in an mrubyOutputFilter or "
        "mrubyInputFilter script\n"
        "Apache::AuthnProvider is only available in a script run as a "
        "mruby authn provider")


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
    out = a.raw(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /c HTTP/1.1\r\nHost: x\r\n"
                b"Connection: close\r\n\r\n")
    assert b"AFTER" not in out
    # the second response starts right after the first one's last chunk
    first, sep, second = out.partition(b"\r\n0\r\n\r\n")
    assert sep and first.startswith(b"HTTP/1.1 200")
    assert second.startswith(b"HTTP/1.1 200")
    a.wait_log("mrubyLogTransactionMiddle: RuntimeError: rputs: the "
               "response can no longer take a body")


def test_table_assign_nil_deletes(apache):
    a = apache("""
<Location /t>
    mrubyHandlerMiddleCode 'r = Apache::Request.new; t = r.headers_out; t["X-Gone"] = "1"; t["X-Kept"] = "1"; t["X-Gone"] = nil; Apache.rputs t["X-Gone"].inspect'
</Location>
""")
    r = a.get("/t")
    assert r.text == "nil"
    assert "X-Gone" not in r.headers
    assert r.headers["X-Kept"] == "1"
