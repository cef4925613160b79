"""ngx_mruby: errors as a user meets them, and isolation between scripts."""

import re


def test_exception_gives_500_and_one_log_line(nginx):
    # info: the one-line error (at debug its frames get lines of their own)
    n = nginx("location / { mruby_content_handler {dir}/boom.rb; }",
              files={"boom.rb": "x = 1\n\nraise ArgumentError, 'it broke'\n"},
              loglevel="info")
    r = n.get("/")
    assert r.status_code == 500
    assert "it broke" not in r.text
    log = n.wait_log("it broke")
    lines = [l for l in log.splitlines() if "it broke" in l]
    assert len(lines) == 1
    assert re.search(r"\[error\].*ArgumentError: it broke .*boom\.rb:3",
                     lines[0]), lines[0]
    # the worker is still there and serves the next request
    assert n.get("/").status_code == 500
    assert len(n.worker_pids()) == 1


def test_exception_after_send_header_closes(nginx):
    """Once the header is out, the client must not take a cut body for a
    whole one: no last chunk, the connection closes."""
    n = nginx("location / { mruby_content_handler_code "
              "'Nginx.send_header 200; Nginx.rputs \"part\" * 30000; "
              "raise \"late\"'; }")
    resp = n.raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    # nothing, or a chunked 200 cut before its last chunk: nginx keeps the
    # header sent by send_header in its buffers until the first output
    head, _, body = resp.partition(b"\r\n\r\n")
    assert resp == b"" or (head.startswith(b"HTTP/1.1 200")
                           and b"Transfer-Encoding: chunked" in head
                           and not body.endswith(b"0\r\n\r\n")), resp[:300]
    n.wait_log("RuntimeError: late")


def test_exceptions_in_every_phase(nginx):
    phases = ["mruby_rewrite_handler_code", "mruby_access_handler_code",
              "mruby_content_handler_code",
              "mruby_output_header_filter_code",
              "mruby_output_body_filter_code"]
    content = "mruby_content_handler_code 'Nginx.rputs \"x\"';"
    conf = "\n".join(
        "location /%d { %s 'raise \"in phase %d\"'; %s }"
        % (i, p, i, "" if "content" in p else content)
        for i, p in enumerate(phases))
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_server_rewrite_handler_code 'raise "in server_rewrite" if Nginx::Request.new.uri == "/sr"';
%s
}""" % conf)
    for i, p in enumerate(phases):
        r = n.get("/%d" % i)
        assert r.status_code == 500, p
        assert "x" != r.text
        n.wait_log("in phase %d" % i)
    assert n.get("/sr").status_code == 500
    n.wait_log("in server_rewrite")


def test_syntax_error_in_inline_code_fails_configtest(nginx):
    n = nginx("location / {\n    mruby_content_handler_code 'if true';\n}",
              start=False)
    rc, out = n.configtest()
    assert rc != 0
    # file:line of the configuration where the code is written
    assert re.search(re.escape(n.conf_path) + r":\d+: .*syntax error", out), out


def test_syntax_error_in_cached_file_fails_configtest(nginx):
    n = nginx("location / { mruby_content_handler {dir}/bad.rb cache; }",
              files={"bad.rb": "ok = 1\nend\n"}, start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert n.dir + "/bad.rb:2:" in out, out


def test_missing_cached_file_fails_configtest(nginx):
    n = nginx("location / { mruby_content_handler {dir}/none.rb cache; }",
              start=False)
    rc, out = n.configtest()
    assert rc != 0 and "none.rb" in out


def test_stat_syntax_error_then_fix(nginx):
    """With mruby_stat_on_error fail (by default the last version that
    compiled goes on: test/shared/test_stat_edits_live.py)."""
    n = nginx("mruby_stat_on_error fail;\n"
              "location / { mruby_content_handler {dir}/s.rb; }",
              files={"s.rb": "Nginx.rputs 'v1'"})
    assert n.get("/").text == "v1"
    n.write("s.rb", "Nginx.rputs(\n")
    assert n.get("/").status_code == 500
    n.wait_log("s.rb:")
    n.write("s.rb", "Nginx.rputs 'v2 fixed'")
    assert n.get("/").text == "v2 fixed"


def test_missing_stat_file_is_500_not_config_error(nginx):
    n = nginx("location / { mruby_content_handler {dir}/later.rb; }")
    assert n.get("/").status_code == 500
    n.wait_log("later.rb")
    n.write("later.rb", "Nginx.rputs 'now here'")
    assert n.get("/").text == "now here"


def test_isolation_between_scripts_and_requests(nginx):
    n = nginx("""
location /a { mruby_content_handler {dir}/a.rb; }
location /b { mruby_content_handler {dir}/b.rb; }
""", files={
        "a.rb": "$g = 'global of a'\nTOP = 'constant of a'\n@iv = 'ivar of a'\n"
                "Nginx.rputs 'a'",
        "b.rb": "Nginx.rputs [$g.inspect, Object.const_defined?(:TOP).to_s,"
                " @iv.inspect].join('|')",
    })
    assert n.get("/b").text == "nil|false|nil"
    assert n.get("/a").text == "a"
    assert n.get("/b").text == "nil|false|nil"
    # and a script does not see what it left itself in the last request
    n2 = nginx("location / { mruby_content_handler_code "
               "'Nginx.rputs $count.inspect; $count = 1'; }")
    assert n2.get("/").text == "nil"
    assert n2.get("/").text == "nil"


def test_worker_survives_many_errors(nginx):
    n = nginx("location / { mruby_content_handler_code "
              "'raise \"again\" if Nginx::Request.new.args == \"x\"; "
              "Nginx.rputs \"ok\"'; }")
    pids = n.worker_pids()
    for _ in range(50):
        assert n.get("/?x").status_code == 500
    assert n.get("/").text == "ok"
    assert n.worker_pids() == pids


def test_failing_startup_script_is_logged_and_worker_serves(nginx):
    n = nginx("""
mruby_init_worker_code 'raise "init_worker broke"';
server {
    listen 127.0.0.1:{port};
    location / { mruby_content_handler_code 'Nginx.rputs "up"'; }
}""")
    assert n.get("/").text == "up"
    log = n.wait_log("init_worker broke")
    assert re.search(r"\[error\].* mruby: mruby_init_worker: RuntimeError: "
                     r"init_worker broke", log), log


def test_handler_given_twice_is_a_config_error(nginx):
    n = nginx("location / { mruby_content_handler_code 'a = 1';\n"
              "mruby_content_handler_code 'b = 2'; }", start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert re.search(r'"mruby_content_handler_code" directive is duplicate '
                     r"in " + re.escape(n.conf_path), out), out
