"""ngx_mruby next to nginx's other modules (error_page, try_files,
auth_request, if, named locations, not_modified): no crash, no desync, no
silent no-op.  Each test is a statement of the "When scripts run" section
of docs/nginx.md, or a case where a script and such a module met."""

import os
import re
import socket
import subprocess

import harness
from test_nginx_phases import code


def raw_exchange(n, data, reads=1, timeout=5.0):
    """Sends data on one connection, reads until `reads` responses' worth
    of bytes stop coming (the server keeps the connection open)."""
    s = socket.create_connection(("127.0.0.1", n.port), timeout=timeout)
    s.sendall(data)
    s.settimeout(1.0)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        pass
    s.close()
    return out


# --- defect 1: read body + DECLINED restarted the phases at our handler ---

def test_declined_content_script_with_read_body_serves_next_handler(nginx):
    n = nginx("mruby_enable_read_request_body on;\n"
              "location / { mruby_content_handler_code "
              + code("Nginx.return Nginx::DECLINED") + "; }\n",
              docs={"index.html": "static\n"})
    for _ in range(3):
        assert n.get("/index.html").text == "static\n"
        r = n.post("/index.html", data="a=1")
        # nginx's static module refuses POST: 405, from a live worker
        assert r.status_code == 405
    assert "signal" not in n.error_log()


def test_add_handler_with_read_body_leaves_other_uris(nginx):
    n = nginx("mruby_add_handler on;\nmruby_enable_read_request_body on;\n",
              docs={"index.html": "static\n",
                    "hi.rb": 'Nginx.rputs "body=" + Nginx::Request.new.body.to_s'})
    assert n.get("/").text == "static\n"
    assert n.get("/index.html").text == "static\n"
    assert n.post("/hi.rb", data="xyz").text == "body=xyz"
    assert "signal" not in n.error_log()


# --- defect 2: body bytes where the response takes none ---

def test_send_header_then_rputs_on_head_keeps_connection_in_step(nginx):
    n = nginx("location / { mruby_content_handler_code "
              + code('Nginx.send_header 200; Nginx.rputs "BODYBYTES"')
              + "; }")
    out = raw_exchange(n, b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, rest = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    # the next response starts right after the HEAD's header
    assert rest.startswith(b"HTTP/1.1 200"), rest[:40]
    assert rest.count(b"BODYBYTES") == 1


def test_send_header_then_rputs_under_auth_request(nginx):
    n = nginx("location = /auth { internal; mruby_content_handler_code "
              + code('Nginx.send_header 403; Nginx.rputs "no"') + "; }\n"
              "location / { auth_request /auth; }\n",
              docs={"index.html": "secret\n"})
    out = raw_exchange(n, b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403"), out[:40]
    assert b"secret" not in out


def test_send_header_then_rputs_on_http2_head(nginx):
    n = nginx("server { listen 127.0.0.1:{port} http2; root {docroot};\n"
              "  location / { mruby_content_handler_code "
              + code('Nginx.send_header 200; Nginx.rputs "BODYBYTES"')
              + "; } }")
    url = f"http://127.0.0.1:{n.port}/"
    out = subprocess.run(["curl", "-sI", "--http2-prior-knowledge", "-m", "5",
                          url], capture_output=True, text=True).stdout
    assert out.startswith("HTTP/2 200")
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-m", "5",
                          url], capture_output=True, text=True).stdout
    assert out == "BODYBYTES"
    assert "output on closed stream" not in n.error_log()


# --- defect 3: accepted, then never run ---

def test_rewrite_handler_inside_if_is_refused(nginx):
    n = nginx("location / { if ($arg_x) { mruby_rewrite_handler_code "
              + code("Nginx.return 403") + "; } }", start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert 'cannot run inside "if"' in out and "nginx.conf:" in out


def test_server_rewrite_handler_in_location_is_refused(nginx):
    n = nginx("location / { mruby_server_rewrite_handler_code "
              + code("Nginx.return 403") + "; }", start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert "cannot run in a location" in out


def test_access_and_content_scripts_inside_if_run(nginx):
    n = nginx("location / { if ($arg_deny) { mruby_access_handler_code "
              + code("Nginx.return 403") + "; } }\n"
              "location /c { if ($arg_c) { mruby_content_handler_code "
              + code('Nginx.rputs "from if"') + ";\n"
              "  mruby_output_header_filter_code "
              + code('Nginx::Request.new.headers_out["X-If"] = "1"')
              + "; } }\n",
              docs={"index.html": "open\n", "c": "file c\n"})
    assert n.get("/index.html").text == "open\n"
    assert n.get("/index.html?deny=1").status_code == 403
    r = n.get("/c?c=1")
    assert (r.text, r.headers.get("X-If")) == ("from if", "1")
    assert n.get("/c").text == "file c\n"


# --- defect 7: validators of the original after a body filter ---

def test_body_filter_drops_validators_of_the_original(nginx):
    n = nginx("location /plain/ { alias {docroot}/; }\n"
              "location / { mruby_output_body_filter_code "
              + code("f = Nginx::Filter.new; "
                     "f.body = f.body + Nginx::Request.new.args.to_s") + "; }",
              docs={"page.html": "page\n"})
    orig = n.get("/plain/page.html")
    etag, lm = orig.headers["ETag"], orig.headers["Last-Modified"]
    r = n.get("/page.html?one", headers={"If-None-Match": etag})
    assert (r.status_code, r.text) == (200, "page\none")
    assert "ETag" not in r.headers and "Last-Modified" not in r.headers
    r = n.get("/page.html?two", headers={"If-Modified-Since": lm})
    assert (r.status_code, r.text) == (200, "page\ntwo")
    r = n.head("/page.html")
    assert "ETag" not in r.headers and "Last-Modified" not in r.headers


# --- defect 8: Nginx.redirect to a named location ---

def test_redirect_to_named_location(nginx):
    n = nginx("location / { mruby_rewrite_handler_code "
              + code('Nginx.redirect "@app"') + "; }\n"
              "location /c { mruby_content_handler_code "
              + code('Nginx.redirect "@app"') + "; }\n"
              "location @app { mruby_content_handler_code "
              + code('Nginx.rputs "app #{Nginx::Request.new.uri}"') + "; }\n")
    r = n.get("/x", allow_redirects=False)
    assert (r.status_code, r.text) == (200, "app /x")
    r = n.get("/c", allow_redirects=False)
    assert (r.status_code, r.text) == (200, "app /c")


# --- defect 10: the stream module's enable file loads after Debian's ---

def makefile_value(name):
    with open(os.path.join(harness.REPO, "Makefile")) as f:
        return re.search(rf"^{name}\s*:=\s*(\S+)", f.read(), re.M).group(1)


def modules_enabled(n, stream_mruby_name):
    """A modules-enabled directory as Debian's nginx has it, with our stream
    module linked under stream_mruby_name; what nginx -t says of it."""
    n.write("modules-enabled/50-mod-stream.conf",
            f"load_module {n.stream_module()};\n")
    n.write("modules-enabled/" + stream_mruby_name,
            f"load_module {harness.NGX_STREAM_MRUBY};\n")
    return n.configtest()


def test_stream_enable_file_sorts_after_debians_stream_module(nginx):
    name = makefile_value("NGINX_STREAM_ENABLED")
    main = ("include {dir}/modules-enabled/*.conf;\n"
            "stream { server { listen 127.0.0.1:{port2}; "
            "mruby_stream_code 'Nginx.return Nginx::Stream::OK'; "
            "proxy_pass 127.0.0.1:{port3}; } }")
    rc, out = modules_enabled(nginx(main_conf=main, start=False), name)
    assert rc == 0, out
    # the name the issue found in use fails: it sorts before 50-mod-stream
    rc, out = modules_enabled(nginx(main_conf=main, start=False),
                              "50-mod-stream-mruby.conf")
    assert rc != 0 and "ngx_stream_core_module" in out


# --- "When scripts run" (docs/nginx.md), one test per statement ---

def trace(what):
    """Ruby: one error-log line per run, tagged by the client's X-T."""
    return code('r = Nginx::Request.new; Nginx.errlogger Nginx::LOG_NOTICE, '
                f'"trace #{{r.headers_in["X-T"]}} {what} #{{r.uri}}"')


def traces(n, tag, expect_last):
    """The trace lines of the request tagged tag, in order, once the line
    expect_last is there."""
    log = n.wait_log(f"trace {tag} {expect_last}")
    return [line.split(f"trace {tag} ", 1)[1].split(",")[0]
            for line in log.splitlines() if f"trace {tag} " in line]


def test_internal_redirects_run_the_scripts_again(nginx):
    n = nginx("mruby_server_rewrite_handler_code " + trace("server_rewrite")
              + ";\nmruby_rewrite_handler_code " + trace("rewrite")
              + ";\nmruby_access_handler_code " + trace("access") + ";\n"
              "location /ep/ { error_page 404 /target.html; }\n"
              "location /tf/ { try_files $uri /target.html; }\n"
              "location /rw/ { rewrite ^ /target.html last; }\n"
              "location /uri/ { mruby_rewrite_handler_code "
              + code('Nginx::Request.new.uri = "/target.html"') + "; }\n"
              "location /nr/ { mruby_rewrite_handler_code "
              + code('Nginx.redirect "/target.html"') + "; }\n"
              "location /named/ { mruby_rewrite_handler_code "
              + code('Nginx.redirect "@named"') + "; }\n"
              "location @named { root {docroot}/n; try_files /p.html =404; }\n",
              docs={"target.html": "target\n", "n/p.html": "named\n"})
    again = ["server_rewrite /target.html", "rewrite /target.html",
             "access /target.html"]
    # error_page, try_files, Nginx.redirect: all phases from server rewrite
    for tag, uri in (("ep", "/ep/x"), ("tf", "/tf/x")):
        assert n.get(uri, headers={"X-T": tag}).text == "target\n"
        assert traces(n, tag, "access /target.html") == [
            f"server_rewrite {uri}", f"rewrite {uri}", f"access {uri}"] + again
    assert n.get("/nr/x", headers={"X-T": "nr"}).text == "target\n"
    assert traces(n, "nr", "access /target.html") == [
        "server_rewrite /nr/x"] + again
    # a named location: its phases from rewrite on
    assert n.get("/named/x", headers={"X-T": "nl"}).text == "named\n"
    assert traces(n, "nl", "access /named/x") == [
        "server_rewrite /named/x", "rewrite /named/x", "access /named/x"]
    # rewrite ... last and r.uri=: the new location's rewrite and access
    assert n.get("/rw/x", headers={"X-T": "rw"}).text == "target\n"
    assert traces(n, "rw", "access /target.html") == [
        "server_rewrite /rw/x", "rewrite /rw/x"] + again[1:]
    assert n.get("/uri/x", headers={"X-T": "uri"}).text == "target\n"
    assert traces(n, "uri", "access /target.html") == [
        "server_rewrite /uri/x"] + again[1:]


def test_subrequests_skip_access_scripts(nginx):
    """auth_request and SSI subrequests run rewrite and content scripts,
    never access scripts: an access script cannot guard auth_request."""
    n = nginx("location = /auth-access { internal;\n"
              "  mruby_rewrite_handler_code " + trace("rewrite") + ";\n"
              "  mruby_access_handler_code " + code("Nginx.return 403") + ";\n"
              "  return 204; }\n"
              "location = /auth-content { internal;\n"
              "  mruby_content_handler_code "
              + code('Nginx.return(Nginx::Request.new.headers_in["X-Key"] == '
                     '"k" ? Nginx::HTTP_NO_CONTENT : Nginx::HTTP_FORBIDDEN)')
              + "; }\n"
              "location /a/ { auth_request /auth-access; }\n"
              "location /c/ { auth_request /auth-content; }\n"
              "location /ssi/ { ssi on; }\n"
              "location = /inc { internal;\n"
              "  mruby_rewrite_handler_code " + trace("rewrite") + ";\n"
              "  mruby_access_handler_code " + trace("access") + ";\n"
              "  mruby_content_handler_code " + trace("content")
              + "; }\n",
              docs={"a/page.html": "let in\n", "c/page.html": "guarded\n",
                    "ssi/page.html": 'x<!--# include virtual="/inc" -->y\n'})
    # the access script's 403 never happens
    r = n.get("/a/page.html", headers={"X-T": "a"})
    assert (r.status_code, r.text) == (200, "let in\n")
    assert traces(n, "a", "rewrite /auth-access") == ["rewrite /auth-access"]
    # a content script's answer is what auth_request acts on
    assert n.get("/c/page.html").status_code == 403
    assert n.get("/c/page.html", headers={"X-Key": "k"}).text == "guarded\n"
    assert n.get("/ssi/page.html", headers={"X-T": "s"}).text == "xy\n"
    assert traces(n, "s", "content /inc") == ["rewrite /inc", "content /inc"]


def test_scripts_run_before_nginx_modules_of_their_phase(nginx):
    n = nginx("location /ret/ { return 404;\n"
              "  mruby_rewrite_handler_code "
              + code('Nginx.rputs "script first"') + "; }\n"
              "location = /auth { internal; mruby_content_handler_code "
              + trace("auth_request") + "; }\n"
              "location /ar/ { auth_request /auth;\n"
              "  mruby_access_handler_code " + trace("access") + "; }\n"
              "location /set/ { set $v from_set;\n"
              "  mruby_rewrite_handler_code "
              + code('Nginx.rputs "v=#{Nginx::Request.new.var.v}"') + "; }\n"
              "location /deny/ { deny all;\n"
              "  mruby_access_handler_code " + trace("access") + "; }\n"
              "location /basic/ { auth_basic area;\n"
              "  auth_basic_user_file {dir}/htpasswd;\n"
              "  mruby_access_handler_code "
              + code('r = Nginx::Request.new; '
                     'Nginx.errlogger Nginx::LOG_NOTICE, '
                     '"trace b user=#{r.user}"; '
                     'Nginx.return 403 if r.user == "mallory"') + "; }\n",
              files={"htpasswd": "alice:{PLAIN}secret\n"},
              docs={"basic/page.html": "members\n", "deny/p.html": "no\n",
                    "ar/p.html": "ar\n"})
    # rewrite: the script runs before "return" and "set"
    assert n.get("/ret/").text == "script first"
    assert n.get("/set/").text == "v="
    # access: before auth_request
    assert n.get("/ar/p.html", headers={"X-T": "ar"}).text == "ar\n"
    assert traces(n, "ar", "auth_request /auth") == [
        "access /ar/p.html", "auth_request /auth"]
    # access: before allow/deny (and deny still answers)
    assert n.get("/deny/p.html", headers={"X-T": "d"}).status_code == 403
    assert traces(n, "d", "access /deny/p.html") == ["access /deny/p.html"]
    # before auth_basic: r.user is the name sent, not yet checked ...
    r = n.get("/basic/page.html", auth=("eve", "wrong"))
    assert r.status_code == 401
    n.wait_log("trace b user=eve")
    assert n.get("/basic/page.html", auth=("alice", "secret")).text \
        == "members\n"
    # ... and a script's 403 comes before auth_basic's 401 challenge
    r = n.get("/basic/page.html", auth=("mallory", "x"))
    assert r.status_code == 403 and "WWW-Authenticate" not in r.headers


def test_internal_tells_error_pages_from_requests(nginx):
    """A script that denies a whole server denies its error pages too,
    unless it lets internal requests through."""
    deny = "error_page 403 /403.html;\nmruby_access_handler_code {};\n"
    page = {"403.html": "custom 403\n", "index.html": "home\n"}
    n = nginx(deny.replace("{}", code("Nginx.return 403")), docs=page)
    r = n.get("/")
    assert r.status_code == 403 and "custom 403" not in r.text
    n = nginx(deny.replace("{}", code(
        "Nginx.return 403 unless Nginx::Request.new.internal?")), docs=page)
    r = n.get("/")
    assert (r.status_code, r.text) == (403, "custom 403\n")


def test_internal_flag(nginx):
    show = code('r = Nginx::Request.new; '
                'Nginx.rputs "#{r.uri} internal=#{r.internal?}"')
    n = nginx("location = /show { mruby_content_handler_code " + show + "; }\n"
              "location /ep/ { error_page 404 =200 /show; }\n"
              "location /rw/ { rewrite ^ /show last; }\n"
              "location /uri/ { mruby_rewrite_handler_code "
              + code('Nginx::Request.new.uri = "/show"') + "; }\n"
              "location /nr/ { mruby_rewrite_handler_code "
              + code('Nginx.redirect "@named"') + "; }\n"
              "location @named { mruby_content_handler_code " + show + "; }\n")
    assert n.get("/show").text == "/show internal=false"
    assert n.get("/ep/x").text == "/show internal=true"
    assert n.get("/rw/x").text == "/show internal=true"
    assert n.get("/uri/x").text == "/show internal=true"
    assert n.get("/nr/x").text == "/nr/x internal=true"


def test_filter_positions(nginx):
    """The header filter runs before add_header; the body filter sees the
    content before SSI and gzip."""
    n = nginx("location /h/ { add_header X-Added yes;\n"
              "  mruby_output_header_filter_code "
              + code('r = Nginx::Request.new; '
                     'r.headers_out["X-Seen"] = '
                     'r.headers_out["X-Added"].nil?.to_s') + "; }\n"
              "location /ssi/ { ssi on;\n"
              "  gzip on; gzip_min_length 1; gzip_types text/html;\n"
              "  mruby_output_body_filter_code "
              + code('f = Nginx::Filter.new; '
                     'f.body = f.body.sub("RAW", f.body.include?("<!--#") ? '
                     '"unexpanded" : "expanded")') + "; }\n",
              docs={"h/p.html": "p\n",
                    "ssi/p.html": 'RAW <!--# echo var="ssi_x" '
                                  'default="from-ssi" -->\n'})
    r = n.get("/h/p.html")
    assert (r.headers["X-Seen"], r.headers["X-Added"]) == ("true", "yes")
    r = n.get("/ssi/p.html", headers={"Accept-Encoding": "gzip"})
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.text == "unexpanded from-ssi\n"
