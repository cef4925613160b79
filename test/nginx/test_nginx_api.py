"""ngx_mruby: the Ruby API, one test per class."""

import json
import socket

from harness import nginx_version, read_until_closed


def ruby_json(n, path, **kw):
    r = n.get(path, **kw)
    assert r.status_code == 200, r.text
    return json.loads(r.text)


# mruby has no JSON: scripts print Ruby's inspect of a Hash of strings,
# which is JSON when keys and values are strings, integers or nil.
INSPECT = 'Nginx.rputs(h.inspect.gsub("=>", ":").gsub("nil", "null"))'


def test_nginx_class(nginx):
    n = nginx("location / { mruby_content_handler {dir}/t.rb; }",
              files={"t.rb": """
h = {
  "server_name" => server_name,
  "class" => get_server_class.to_s,
  "module_name" => Nginx.module_name,
  "module_version" => Nginx.module_version,
  "nginx_version" => Nginx.nginx_version,
  "server_version" => Nginx.server_version,
  "configure_has_compat" => Nginx.configure.include?("--with-compat") ? 1 : 0,
  "OK" => Nginx::OK, "DECLINED" => Nginx::DECLINED, "ERROR" => Nginx::ERROR,
  "DONE" => Nginx::DONE, "AGAIN" => Nginx::AGAIN, "BUSY" => Nginx::BUSY,
  "ABORT" => Nginx::ABORT, "HTTPS_CERT_ERROR" => Nginx::HTTPS_CERT_ERROR,
  "HTTPS_NO_CERT" => Nginx::HTTPS_NO_CERT,
  "HTTP_OK" => Nginx::HTTP_OK, "HTTP_NOT_FOUND" => Nginx::HTTP_NOT_FOUND,
  "HTTP_SERVICE_UNAVAILABLE" => Nginx::HTTP_SERVICE_UNAVAILABLE,
  "HTTP_MOVED_TEMPORARILY" => Nginx::HTTP_MOVED_TEMPORARILY,
  "LOG_STDERR" => Nginx::LOG_STDERR, "LOG_EMERG" => Nginx::LOG_EMERG,
  "LOG_ERR" => Nginx::LOG_ERR,
  "LOG_DEBUG" => Nginx::LOG_DEBUG,
}
""" + INSPECT})
    h = ruby_json(n, "/")
    assert h["server_name"] == "NGINX" and h["class"] == "Nginx"
    assert h["module_name"] == "ngx_mruby"
    assert h["module_version"] == "1.0.0"
    assert h["nginx_version"] == nginx_version()
    assert h["server_version"] == nginx_version()
    assert h["configure_has_compat"] == 1
    assert (h["OK"], h["DECLINED"], h["ERROR"], h["DONE"], h["AGAIN"]) == \
        (0, -5, -1, -4, -2)
    assert (h["BUSY"], h["ABORT"], h["HTTPS_CERT_ERROR"],
            h["HTTPS_NO_CERT"]) == (-3, -6, 495, 496)
    assert (h["HTTP_OK"], h["HTTP_NOT_FOUND"], h["HTTP_SERVICE_UNAVAILABLE"],
            h["HTTP_MOVED_TEMPORARILY"]) == (200, 404, 503, 302)
    assert (h["LOG_STDERR"], h["LOG_EMERG"], h["LOG_ERR"],
            h["LOG_DEBUG"]) == (0, 1, 4, 8)


def test_errlogger_levels(nginx):
    n = nginx("location / { mruby_content_handler_code "
              "'Nginx.errlogger Nginx::LOG_ERR, \"an error line\"; "
              "Nginx.log Nginx::LOG_WARN, \"a warning line\"; "
              "Nginx.log Nginx::LOG_DEBUG, \"not at info\"'; }")
    n.get("/")
    log = n.wait_log("a warning line")
    assert "[error]" in [l for l in log.splitlines() if "an error line" in l][0]
    assert "[warn]" in [l for l in log.splitlines() if "a warning line" in l][0]
    assert "not at info" not in log


def test_errlogger_message_stays_one_line(nginx):
    # a newline in a script's message must not start a line of its own
    # (a forged log entry): escaped as Apache escapes it
    n = nginx("location / { mruby_content_handler_code "
              "'Nginx.errlogger Nginx::LOG_ERR, "
              "\"first\\n[error] FAKE\\r\\x01 end\"'; }")
    n.get("/")
    log = n.wait_log("FAKE")
    lines = [l for l in log.splitlines() if "FAKE" in l]
    assert len(lines) == 1, lines
    assert "first\\n[error] FAKE\\r\\x01 end" in lines[0]


def test_request_attributes(nginx):
    n = nginx("location / { mruby_content_handler {dir}/t.rb; }",
              files={"t.rb": """
r = Nginx::Request.new
h = {
  "uri" => r.uri, "args" => r.args, "method" => r.method,
  "protocol" => r.protocol, "request_line" => r.request_line,
  "unparsed_uri" => r.unparsed_uri, "hostname" => r.hostname,
  "authority" => r.authority, "filename" => r.filename,
  "scheme" => r.scheme, "document_root" => r.document_root,
  "user" => r.user, "sub_request" => r.sub_request?.to_s,
  "uri_args" => r.uri_args["q"], "uri_args_b" => r.uri_args["b"],
}
""" + INSPECT})
    h = ruby_json(n, "/a/b.html?q=x%20y&b=1", headers={"Host": "example.org:81"},
                  auth=("alice", "pw"))
    assert h["uri"] == "/a/b.html"
    assert h["args"] == "q=x%20y&b=1"
    assert h["method"] == "GET"
    assert h["protocol"] == "HTTP/1.1"
    assert h["request_line"] == "GET /a/b.html?q=x%20y&b=1 HTTP/1.1"
    assert h["unparsed_uri"] == "/a/b.html?q=x%20y&b=1"
    assert h["hostname"] == "example.org"
    assert h["authority"] == "example.org:81"
    assert h["filename"] == n.docroot + "/a/b.html"
    assert h["document_root"] == n.docroot
    assert h["scheme"] == "http"
    assert h["user"] == "alice"
    assert h["sub_request"] == "false"
    assert (h["uri_args"], h["uri_args_b"]) == ("x y", "1")


def test_request_setters(nginx):
    n = nginx("""
location /set {
    mruby_rewrite_handler_code 'r = Nginx::Request.new; r.uri_args = {"k" => "a b&c", "n" => 2}';
    mruby_content_handler_code 'r = Nginx::Request.new; r.content_type = "text/x-test"; Nginx.rputs r.args + "|" + r.uri_args["k"]';
}""")
    r = n.get("/set?old=1")
    assert r.text == "k=a%20b%26c&n=2|a b&c"
    assert r.headers["Content-Type"] == "text/x-test"


def test_request_status_is_nginx_status_code(nginx):
    n = nginx("""
location / {
    mruby_content_handler_code '
        r = Nginx::Request.new
        r.status = 202
        begin
          r.status = 42
        rescue ArgumentError => e
          Nginx.rputs e.message
        end
        Nginx.rputs " #{r.status} #{Nginx.status_code}"
    ';
}""")
    r = n.get("/")
    assert (r.status_code, r.text) == (202, "invalid status 42 (a final status is 200-599) 202 202")


def test_headers_in_and_out(nginx):
    n = nginx("""
location / {
    mruby_rewrite_handler_code '
        i = Nginx::Headers_in.new
        i["X-Added"] = "added"
        i["X-Replaced"] = "new"
        i.delete "X-Gone"
    ';
    mruby_content_handler {dir}/t.rb;
}""", files={"t.rb": """
r = Nginx::Request.new
i = r.headers_in
o = r.headers_out
o["X-Out"] = "out"
o["X-Temp"] = "temp"
o.delete "X-Temp"
o["Set-Cookie"] = "a=1"
o["Set-Cookie"] = "b=2"
o["Content-Type"] = "application/x-mine"
h = {
  "added" => i["x-added"], "replaced" => i["X-Replaced"], "gone" => i["X-Gone"],
  "missing" => i["X-Nope"], "all_added" => i.all["X-Added"],
  "out" => o["X-Out"], "ct" => o["content-type"], "temp" => o["X-Temp"],
  "out_all" => o.all["X-Out"],
}
""" + INSPECT})
    r = n.get("/", headers={"X-Replaced": "old", "X-Gone": "bye"})
    h = json.loads(r.text)
    assert h == {"added": "added", "replaced": "new", "gone": None,
                 "missing": None, "all_added": "added", "out": "out",
                 "ct": "application/x-mine", "temp": None,
                 "out_all": "out"}
    assert r.headers["X-Out"] == "out"
    assert "X-Temp" not in r.headers
    assert r.headers["Content-Type"] == "application/x-mine"
    assert r.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]


def test_headers_nil_delete_and_content_length(nginx):
    n = nginx("location / { mruby_content_handler {dir}/t.rb; }",
              files={"t.rb": """
i, o = Nginx::Headers_in.new, Nginx::Headers_out.new
o["X-A"] = "a"
o["Content-Length"] = "12"
h = {
  "in_set" => i.send(:[]=, "X-Twice", nil).nil?, "in_after" => i["X-Twice"],
  "in_del_again" => i.delete("X-Twice"),
  "out_set" => o.send(:[]=, "X-A", nil).nil?, "out_after" => o["X-A"],
  "out_del" => o.delete("X-None").nil?,
  "cl" => o["Content-Length"], "cl_all" => o.all["Content-Length"],
}
begin
  o["Content-Length"] = "twelve"
rescue ArgumentError => e
  h["cl_error"] = e.message
end
o.delete "Content-Length"
h["cl_deleted"] = o["Content-Length"]
""" + INSPECT})
    r = n.get("/", headers={"X-Twice": "1"})
    assert json.loads(r.text) == {
        "in_set": True, "in_after": None, "in_del_again": False,
        "out_set": True, "out_after": None, "out_del": True,
        "cl": "12", "cl_all": "12",
        "cl_error": "invalid Content-Length: twelve", "cl_deleted": None}
    assert "X-A" not in r.headers


def test_deleted_request_header_is_not_proxied(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    location / {
        mruby_rewrite_handler_code 'i = Nginx::Request.new.headers_in; i.delete "X-Secret"; i["X-Via-Ruby"] = "1"';
        proxy_pass http://127.0.0.1:{port2};
    }
}
server {
    listen 127.0.0.1:{port2};
    location / { mruby_content_handler_code 'Nginx.rputs Nginx::Request.new.headers_in.all.keys.sort.join(",")'; }
}""")
    keys = n.get("/", headers={"X-Secret": "s", "User-Agent": "t"}).text
    assert "X-Secret" not in keys
    assert "X-Via-Ruby" in keys and "User-Agent" in keys


def test_binary_and_long_header_values(nginx):
    n = nginx("""
large_client_header_buffers 4 64k;
location / {
    mruby_content_handler_code '
        r = Nginx::Request.new
        v = r.headers_in["X-Long"]
        r.headers_out["X-Echo-Len"] = v.size.to_s
        r.headers_out["X-Bin"] = "a\\xffb\\tc"
        begin
          r.headers_out["X-Ctl"] = "a\\x01b"
        rescue ArgumentError
          r.headers_out["X-Ctl"] = "refused"
        end
        Nginx.rputs "\\x00\\xffz" + v[0, 3]
    ';
}""")
    long = "v" * 16384
    r = n.get("/", headers={"X-Long": long})
    assert r.headers["X-Echo-Len"] == "16384"
    assert r.content == b"\x00\xffzvvv"
    assert r.raw.headers["X-Bin"] == "a\xffb\tc"
    assert r.headers["X-Ctl"] == "refused"


def test_var(nginx):
    n = nginx("""
location / {
    set $mine "initial";
    set $mine2 "initial2";
    mruby_content_handler_code '
        v = Nginx::Var.new
        before = v.mine
        v.mine = "changed"
        v.set "mine2", "set by set"
        Nginx.rputs [before, v.mine, v.mine2, v.request_method, v.arg_a.to_s,
                     v.exist?("mine").to_s, v.exist?("nonesuch").to_s,
                     Nginx::Request.new.var.uri].join("|")
    ';
}""")
    assert n.get("/p?a=7").text == (
        "initial|changed|set by set|GET|7|true|false|/p")


def test_var_set_undeclared_raises(nginx):
    n = nginx("location / { mruby_content_handler_code "
              "'Nginx::Var.new.undeclared_var = \"x\"'; }")
    assert n.get("/").status_code == 500
    n.wait_log("variable $undeclared_var is not declared")


def test_connection_and_server(nginx):
    n = nginx("location / { mruby_content_handler {dir}/t.rb; }",
              files={"t.rb": """
c = Nginx::Connection.new
s = Nginx::Server.new
h = {
  "remote_ip" => c.remote_ip, "remote_port" => c.remote_port,
  "local_ip" => c.local_ip, "local_port" => c.local_port,
  "document_root" => s.document_root, "path" => s.path,
  "realpath_root" => s.realpath_root,
}
""" + INSPECT})
    with socket.create_connection(("127.0.0.1", n.port)) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = read_until_closed(sock)
        my_port = sock.getsockname()[1]
    h = json.loads(data.split(b"\r\n\r\n", 1)[1])
    assert h["remote_ip"] == "127.0.0.1"
    assert h["remote_port"] == my_port
    assert h["local_ip"] == "127.0.0.1"
    assert h["local_port"] == n.port
    assert h["document_root"] == n.docroot
    assert h["path"] == h["realpath_root"]
    assert h["realpath_root"] == n.docroot


def test_redirect(nginx):
    n = nginx("""
location /out { mruby_rewrite_handler_code 'Nginx.redirect "https://example.com/there", 301'; }
location /out302 { mruby_content_handler_code 'Nginx.redirect "http://example.com/x"'; }
location /in { mruby_access_handler_code 'Nginx.redirect "/target?from=in"'; }
location /target { mruby_content_handler_code 'r = Nginx::Request.new; Nginx.rputs "target #{r.uri} #{r.args}"'; }
""")
    r = n.get("/out")
    assert (r.status_code, r.headers["Location"]) == \
        (301, "https://example.com/there")
    r = n.get("/out302")
    assert (r.status_code, r.headers["Location"]) == \
        (302, "http://example.com/x")
    r = n.get("/in")
    assert (r.status_code, r.text) == (200, "target /target from=in")



def test_internal_redirect_keeps_the_query_string(nginx):
    """Nginx.redirect "/path" passes the request's query string on, as
    nginx's rewrite and the original do; "/path?args" replaces it."""
    n = nginx("""
location /keep { mruby_rewrite_handler_code 'Nginx.redirect "/target"'; }
location /replace { mruby_rewrite_handler_code 'Nginx.redirect "/target?b=2"'; }
location /target { mruby_content_handler_code 'r = Nginx::Request.new; Nginx.rputs "target #{r.uri} #{r.args}"'; }
""")
    assert n.get("/keep?a=1&c=3").text == "target /target a=1&c=3"
    assert n.get("/keep").text == "target /target "
    assert n.get("/replace?a=1").text == "target /target b=2"

def test_filter_class_only_in_body_filter(nginx):
    n = nginx("location / { mruby_content_handler_code 'Nginx::Filter.new.body'; }")
    assert n.get("/").status_code == 500
    n.wait_log("only in mruby_output_body_filter")


def test_rputs_in_log_phase_is_an_error_not_a_crash(nginx):
    n = nginx("location / { mruby_log_handler_code 'Nginx.rputs \"late\"'; "
              "return 200 \"fine\\n\"; }")
    assert n.get("/").text == "fine\n"
    n.wait_log("the response can no longer take a body")
    assert n.get("/").text == "fine\n"  # the worker lives on
