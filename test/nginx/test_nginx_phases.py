"""ngx_mruby: one test per directive, against a real nginx."""

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import harness


def code(ruby):
    """An inline script as an nginx string argument."""
    return "'" + ruby.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_content_handler_file_and_code(nginx):
    n = nginx(
        "location /file { mruby_content_handler {dir}/hello.rb; }\n"
        "location /cached { mruby_content_handler {dir}/hello.rb cache; }\n"
        "location /code { mruby_content_handler_code "
        + code('Nginx.rputs "inline"; Nginx.echo "!"') + "; }\n",
        files={"hello.rb": 'Nginx.rputs "Hello #{Nginx.module_name}"'})
    r = n.get("/file")
    assert (r.status_code, r.text) == (200, "Hello ngx_mruby")
    assert r.headers["Content-Length"] == str(len("Hello ngx_mruby"))
    assert n.get("/cached").text == "Hello ngx_mruby"
    assert n.get("/code").text == "inline!\n"


def test_content_handler_return_codes(nginx):
    n = nginx(
        "location /404 { mruby_content_handler_code "
        + code("Nginx.return Nginx::HTTP_NOT_FOUND") + "; }\n"
        "location /body404 { mruby_content_handler_code "
        + code('Nginx.rputs "gone"; Nginx.return Nginx::HTTP_NOT_FOUND')
        + "; }\n"
        "location /status { mruby_content_handler_code "
        + code('Nginx.status_code = 201; Nginx.rputs "made"') + "; }\n"
        "location /declined/ { mruby_content_handler_code "
        + code("Nginx.return Nginx::DECLINED") + "; }\n"
        "location /empty { mruby_content_handler_code " + code("1") + "; }\n",
        docs={"declined/index.html": "static file\n"})
    r = n.get("/404")
    assert r.status_code == 404 and "404 Not Found" in r.text
    r = n.get("/body404")
    assert (r.status_code, r.text) == (404, "gone")
    r = n.get("/status")
    assert (r.status_code, r.text) == (201, "made")
    # DECLINED: the next content handler (static files) answers
    r = n.get("/declined/index.html")
    assert (r.status_code, r.text) == (200, "static file\n")
    r = n.get("/empty")
    assert (r.status_code, r.text) == (200, "")



def test_return_http_ok_promises_a_body(nginx):
    """Nginx.return Nginx::HTTP_OK from a content script that wrote
    nothing is a 500 and an error line, as in the original; with a body,
    or Nginx::OK, or no return, the answer is a 200."""
    n = nginx(
        "location /nobody { mruby_content_handler_code "
        + code("Nginx.return Nginx::HTTP_OK") + "; }\n"
        "location /body { mruby_content_handler_code "
        + code('Nginx.rputs "body"; Nginx.return Nginx::HTTP_OK') + "; }\n"
        "location /ok { mruby_content_handler_code "
        + code("Nginx.return Nginx::OK") + "; }\n")
    assert n.get("/nobody").status_code == 500
    n.wait_log("status code is 200, but response body is empty")
    r = n.get("/body")
    assert (r.status_code, r.text) == (200, "body")
    r = n.get("/ok")
    assert (r.status_code, r.text) == (200, "")


def test_status_code_ends_a_phase_as_return_does(nginx):
    """Nginx.status_code = n is Nginx.return(n) (one function in the
    original): a rewrite or access script that sets it ends its phase with
    that status instead of going on to the next handler."""
    n = nginx(
        "location /rewrite { mruby_rewrite_handler_code "
        + code("Nginx.status_code = 204") + "; }\n"
        "location /access { mruby_access_handler_code "
        + code("Nginx.status_code = Nginx::HTTP_FORBIDDEN") + "; }\n"
        "location /request { mruby_rewrite_handler_code "
        + code("Nginx::Request.new.status = 410") + "; }\n",
        docs={"rewrite": "static\n", "access": "static\n",
              "request": "static\n"})
    r = n.get("/rewrite")
    assert (r.status_code, r.text) == (204, "")
    assert n.get("/access").status_code == 403
    assert n.get("/request").status_code == 410

def test_send_header_streams_body(nginx):
    n = nginx("location / { mruby_content_handler_code "
              + code('Nginx.send_header 202; Nginx.rputs "a"; '
                     'Nginx.rputs "b"') + "; }")
    r = n.get("/")
    assert (r.status_code, r.text) == (202, "ab")
    assert r.headers.get("Transfer-Encoding") == "chunked"


def test_post_read_handler(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_post_read_handler_code 'r = Nginx::Request.new; r.headers_in["X-Seen"] = "post_read:" + r.uri';
    location / { mruby_content_handler_code 'Nginx.rputs Nginx::Request.new.headers_in["X-Seen"].to_s'; }
}""")
    assert n.get("/abc").text == "post_read:/abc"


def test_server_rewrite_handler_answers(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_server_rewrite_handler_code 'r = Nginx::Request.new; Nginx.return 418 if r.uri == "/teapot"';
    location / { return 200 "through\\n"; }
}""")
    assert n.get("/teapot").status_code == 418
    assert n.get("/other").text == "through\n"


def test_rewrite_handler_changes_uri_and_location(nginx):
    n = nginx(
        "location /old { mruby_rewrite_handler_code "
        + code('r = Nginx::Request.new; r.uri = "/new" + r.uri[4..-1]')
        + "; }\n"
        "location /new { mruby_content_handler_code "
        + code('Nginx.rputs "new:" + Nginx::Request.new.uri') + "; }\n")
    assert n.get("/old/page").text == "new:/new/page"


def test_access_handler(nginx):
    n = nginx(
        "location / {\n"
        "  mruby_access_handler_code "
        + code('r = Nginx::Request.new\n'
               'Nginx.return Nginx::HTTP_FORBIDDEN if r.headers_in["X-Key"] != "s3cret"')
        + ";\n  mruby_content_handler_code " + code('Nginx.rputs "in"') + ";\n}")
    assert n.get("/").status_code == 403
    r = n.get("/", headers={"X-Key": "s3cret"})
    assert (r.status_code, r.text) == (200, "in")


def test_access_handler_ok_with_satisfy_any(nginx):
    # satisfy any: a script that says OK lets the request in although
    # "deny all" refuses it
    n = nginx("""
location / {
    satisfy any;
    deny all;
    mruby_access_handler_code 'Nginx.return(Nginx::Request.new.args == "open" ? Nginx::OK : Nginx::HTTP_FORBIDDEN)';
    mruby_content_handler_code 'Nginx.rputs "in"';
}""")
    assert n.get("/?open").text == "in"
    assert n.get("/?closed").status_code == 403


def test_log_handler(nginx):
    n = nginx("location / {\n  mruby_log_handler_code "
              + code('r = Nginx::Request.new; Nginx.errlogger Nginx::LOG_NOTICE, '
                     '"logged #{r.uri} #{Nginx.status_code}"')
              + ";\n  return 204;\n}")
    assert n.get("/x1").status_code == 204
    n.wait_log("logged /x1 204")


def test_add_handler_runs_the_rb_file(nginx):
    n = nginx("location / { mruby_add_handler on; }",
              docs={"page.rb": 'Nginx.rputs "page " + Nginx::Request.new.uri',
                    "plain.txt": "plain\n"})
    assert n.get("/page.rb").text == "page /page.rb"
    assert n.get("/plain.txt").text == "plain\n"
    assert n.get("/missing.rb").status_code == 404


def test_mruby_set_and_set_code(nginx):
    n = nginx("""
location / {
    mruby_set $from_file {dir}/set.rb;
    mruby_set_code $from_code 'Nginx::Request.new.args.to_s * 2';
    return 200 "$from_file|$from_code\\n";
}""", files={"set.rb": '"computed #{1 + 2}"'})
    assert n.get("/?ab").text == "computed 3|abab\n"


def test_mruby_set_error_is_logged_and_leaves_the_variable_empty(nginx):
    n = nginx("""
location / {
    mruby_set_code $broken 'raise "set broke"';
    return 200 "[$broken]\\n";
}""")
    assert n.get("/").text == "[]\n"
    log = n.wait_log("set broke")
    lines = [l for l in log.splitlines() if "set broke" in l]
    assert len(lines) == 1 and "[error]" in lines[0], lines
    assert "mruby: RuntimeError: set broke" in lines[0], lines


def test_mruby_set_per_location(nginx):
    n = nginx("""
mruby_set_code $v '"outer"';
location /a { return 200 "$v\\n"; }
location /b { mruby_set_code $v '"inner"'; return 200 "$v\\n"; }
""")
    assert n.get("/a").text == "outer\n"
    assert n.get("/b").text == "inner\n"


def test_output_header_filter(nginx):
    n = nginx("location / { mruby_output_header_filter_code "
              + code('r = Nginx::Request.new\n'
                     'o = r.headers_out\n'
                     'o["X-Filtered"] = "yes"\n'
                     'o["X-Status"] = Nginx.status_code.to_s\n'
                     'o.delete "ETag"')
              + "; }", docs={"index.html": "hi\n"})
    plain = nginx("", docs={"index.html": "hi\n"}).get("/index.html")
    assert "ETag" in plain.headers  # what the filter takes away
    r = n.get("/index.html")
    assert r.text == "hi\n"
    assert r.headers["X-Filtered"] == "yes"
    assert r.headers["X-Status"] == "200"
    assert "ETag" not in r.headers


def test_output_body_filter_static(nginx):
    n = nginx("location / { mruby_output_body_filter_code "
              + code('f = Nginx::Filter.new; f.body = "[" + f.body.upcase + "]"')
              + "; }", docs={"index.html": "hello\n"})
    r = n.get("/index.html")
    assert r.text == "[HELLO\n]"
    assert r.headers["Content-Length"] == "8"


def test_filters_returning_a_status(nginx):
    n = nginx("""
location /h { mruby_output_header_filter_code 'Nginx.return Nginx::HTTP_FORBIDDEN'; }
location /b { mruby_output_body_filter_code 'Nginx.return 201'; }
location /f { mruby_output_header_filter_code 'Nginx::Filter.new.body'; }
""", docs={"h/index.html": "hi\n", "b/index.html": "bye\n",
           "f/index.html": "x\n"})
    r = n.get("/h/")
    assert (r.status_code, r.text) == (403, "hi\n")
    r = n.get("/b/")
    assert (r.status_code, r.text) == (201, "bye\n")
    assert n.get("/f/").status_code == 500
    n.wait_log("Nginx::Filter: only in mruby_output_body_filter")


class _Chunked(BaseHTTPRequestHandler):
    """A backend that streams its body in chunks, with pauses."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (b"one ", b"two ", b"three"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def chunked_backend():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Chunked)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_output_body_filter_on_chunked_proxied_response(nginx,
                                                       chunked_backend):
    n = nginx("""
location /plain/ { proxy_pass http://127.0.0.1:%d/; proxy_http_version 1.1; proxy_buffering off; }
location /filtered/ {
    proxy_pass http://127.0.0.1:%d/;
    proxy_http_version 1.1;
    proxy_buffering off;
    mruby_output_body_filter_code 'f = Nginx::Filter.new; f.body = f.body.split(" ").reverse.join(",")';
}""" % (chunked_backend, chunked_backend))
    assert n.get("/plain/").text == "one two three"
    r = n.get("/filtered/")
    assert (r.status_code, r.text) == (200, "three,two,one")
    # the whole body was seen at once: it now has a length
    assert r.headers["Content-Length"] == str(len("three,two,one"))


def test_output_body_filter_error_gives_500(nginx):
    n = nginx("location / { mruby_output_body_filter_code "
              + code('raise "filter broke"') + "; }",
              docs={"index.html": "secret\n"})
    r = n.get("/index.html")
    assert r.status_code == 500
    assert "secret" not in r.text
    n.wait_log("RuntimeError: filter broke")


def test_enable_read_request_body(nginx):
    n = nginx("""
location /access {
    mruby_enable_read_request_body on;
    mruby_access_handler_code 'Nginx.return Nginx::HTTP_FORBIDDEN unless Nginx::Request.new.body.include?("let-me-in")';
    mruby_content_handler_code 'Nginx.rputs "ok"';
}
location /content {
    mruby_enable_read_request_body on;
    mruby_content_handler_code 'r = Nginx::Request.new; Nginx.rputs "#{r.body.size}:#{r.post_args["b"]}"';
}
location /off {
    mruby_content_handler_code 'Nginx::Request.new.body';
}""")
    assert n.post("/access", data="nope").status_code == 403
    assert n.post("/access", data="please let-me-in").text == "ok"
    assert n.post("/content", data="a=1&b=x+y%21").text == "12:x y!"
    # a large body goes through a temporary file
    big = "b=" + "z" * 200000
    assert n.post("/content", data=big).text == "%d:%s" % (len(big),
                                                            "z" * 200000)
    assert n.post("/off", data="x").status_code == 500
    n.wait_log("mruby_enable_read_request_body on")


def test_init_and_init_worker_and_exit_worker(nginx):
    n = nginx("""
mruby_init_code 'Nginx.errlogger Nginx::LOG_NOTICE, "init in the master"';
mruby_init_worker_code '$greeting = "from init_worker"';
mruby_exit_worker_code 'Nginx.errlogger Nginx::LOG_NOTICE, "worker exits"';
server {
    listen 127.0.0.1:{port};
    location / { mruby_content_handler_code 'Nginx.rputs "#{$greeting} #{$mine.inspect}"; $mine = 1'; }
}""")
    # a request script's own globals do not stay, init_worker's do
    assert n.get("/").text == "from init_worker nil"
    assert n.get("/").text == "from init_worker nil"
    n.wait_log("init in the master")
    n.stop()
    assert "worker exits" in n.error_log()


def test_init_state_is_inherited_by_every_worker(nginx):
    """What mruby_init defines in the master (a global, a constant, a
    class) is there in each worker, as in the original; after a reload,
    the new workers have the new configuration's."""
    conf = """
mruby_init_code '$from_init = "GEN"; INIT_CONST = 1; class FromInit; def self.hi; "hi GEN"; end; end';
server {
    listen 127.0.0.1:{port};
    location / { mruby_content_handler {dir}/show.rb; }
}"""
    n = nginx(conf.replace("GEN", "one"), workers=2, files={"show.rb": (
        'Nginx.rputs "#{$from_init} #{INIT_CONST} #{FromInit.hi} #{'
        + harness.PID_RB + '}"')})
    answers = [r.text.rsplit(" ", 1) for r in n.get_spread("/", count=24)]
    assert {a for a, _ in answers} == {"one 1 hi one"}
    n.conf = conf.replace("GEN", "two")
    n.reload()
    assert {r.text.rsplit(" ", 1)[0] for r in n.get_spread("/")} == {
        "two 1 hi two"}


def test_mruby_cache_on_compiles_at_config(nginx):
    n = nginx("mruby_cache on;\nlocation / { mruby_content_handler {dir}/broken.rb; }",
              files={"broken.rb": "def oops(\n"}, start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert "broken.rb:" in out


def test_cache_flag_never(nginx):
    n = nginx("location / { mruby_content_handler {dir}/v.rb never; }",
              files={"v.rb": 'Nginx.rputs "v1"'})
    assert n.get("/").text == "v1"
    n.write("v.rb", 'Nginx.rputs "v2"')
    assert n.get("/").text == "v2"


def test_mruby_cache_directive_sets_the_policy(nginx):
    """mruby_cache stat|off (both `stat`), never and on (`forever`) for the
    file scripts of a block, told apart by what each sees of two edits:
    one that no file watch reports (only `never` reads the file on every
    run) and an ordinary one (everything but `forever` applies it)."""
    policies = ("stat", "off", "never", "on")
    n = nginx("\n".join(
        f"location /{p} {{ mruby_cache {p}; "
        f"mruby_content_handler {{dir}}/{p}.rb; }}" for p in policies),
        files={f"{p}.rb": 'Nginx.rputs "11"' for p in policies})
    writers = {p: harness.UnnoticedWriter(os.path.join(n.dir, f"{p}.rb"))
               for p in policies}
    # the first runs put the files under watch
    for _ in range(3):
        assert {p: n.get(f"/{p}").text for p in policies} == dict.fromkeys(
            policies, "11")
    for w in writers.values():
        w.replace(b"11", b"22")
    assert {p: n.get(f"/{p}").text for p in policies} == {
        "stat": "11", "off": "11", "never": "22", "on": "11"}
    for w in writers.values():
        w.close()
    for p in policies:
        n.write(f"{p}.rb", 'Nginx.rputs "333"')
    assert {p: n.get(f"/{p}").text for p in policies} == {
        "stat": "333", "off": "333", "never": "333", "on": "11"}


def test_invalid_policy_is_a_config_error(nginx):
    n = nginx("location / { mruby_content_handler {dir}/x.rb sometimes; }",
              files={"x.rb": "1"}, start=False)
    rc, out = n.configtest()
    assert rc != 0 and 'invalid cache policy "sometimes"' in out


def test_duplicate_handler_is_a_config_error(nginx):
    n = nginx("location / { mruby_content_handler_code '1'; "
              "mruby_content_handler_code '2'; }", start=False)
    rc, out = n.configtest()
    assert rc != 0 and "is duplicate" in out


def test_shared_dict_directive(nginx):
    n = nginx("""
mruby_shared_dict counters 1m;
server {
    listen 127.0.0.1:{port};
    location / { mruby_content_handler {dir}/count.rb; }
}""", workers=2, files={"count.rb": (
        'd = Nginx::SharedDict.new("counters")\n'
        'Nginx.rputs "#{d.incr("hits", 1, init: 0)} #{' + harness.PID_RB
        + '}"')})
    answers = [r.text.split() for r in n.get_spread("/", count=40)]
    # one counter, whichever worker answered
    assert sorted(int(c) for c, _ in answers) == list(range(1, 41))
    assert len({pid for _, pid in answers}) == 2


def test_shared_dict_bad_size_is_a_config_error(nginx):
    n = nginx("mruby_shared_dict counters lots;\n"
              "server { listen 127.0.0.1:{port}; }", start=False)
    rc, out = n.configtest()
    assert rc != 0 and 'invalid size "lots"' in out
