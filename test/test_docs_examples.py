"""Every code block of docs/*.md and README.md runs as written, on the real
servers, so that the documentation and the behaviour cannot drift apart.

Each fenced block carries a marker in an HTML comment on the line before
its opening fence (invisible where the Markdown is rendered):

    <!-- example: NAME -->     run by the test of that name below
    <!-- not run: REASON -->   shell commands that change the system,
                               sample output, a file layout

A block without a marker, a marker without a test, or a test without its
block fails: nothing is skipped silently.  A test takes its block's text
from the document and changes only what must differ on a test machine
(absolute paths and ports, each replacement listed where it is made).

In Ruby blocks, a line whose comment begins with a Ruby literal
(`r.get("k")  # => "v"`, `d.incr("n")  # => nil: absent`) is checked:
its statement's value must equal that literal.
"""

import glob
import os
import pwd
import re
import shutil
import socket
import ssl
import subprocess
import threading

import pytest

import harness
from harness import REPO

DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))) + [
    os.path.join(REPO, "README.md")]

MARKER = re.compile(r"^\s*<!-- (example|not run): (.+?) -->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


class Block:
    def __init__(self, path, line, lang, text, marker):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.kind, self.name = marker if marker else (None, None)

    def where(self):
        return f"{os.path.relpath(self.path, REPO)}:{self.line}"


def doc_blocks():
    """Every fenced block of the documents, with its marker."""
    blocks = []
    for path in DOCS:
        lines = open(path).read().split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            indent, lang, start = m.group(1), m.group(2), i
            i += 1
            body = []
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i][len(indent):]
                            if lines[i].startswith(indent) else lines[i])
                i += 1
            i += 1
            mark = MARKER.match(lines[start - 1]) if start else None
            blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n",
                                mark.groups() if mark else None))
    return blocks


BLOCKS = doc_blocks()
EXAMPLES = {b.name: b for b in BLOCKS if b.kind == "example"}
RUNNERS = {}


def runs(name):
    """Registers the test of the example NAME."""
    def register(fn):
        RUNNERS[name] = fn
        return fn
    return register


def example(name):
    return EXAMPLES[name].text


def test_every_block_is_marked_and_every_example_has_a_test():
    unmarked = [b.where() for b in BLOCKS if b.kind is None]
    assert not unmarked, ("code blocks without <!-- example: NAME --> or "
                          "<!-- not run: REASON --> before them: "
                          + ", ".join(unmarked))
    names = [b.name for b in BLOCKS if b.kind == "example"]
    assert len(names) == len(set(names)), f"duplicate example names {names}"
    assert set(names) - set(RUNNERS) == set(), "examples without a test"
    assert set(RUNNERS) - set(names) == set(), "tests without an example"


# --- Ruby blocks with "# => value" comments ---

LITERAL = re.compile(r'''\s*(?P<lit>"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?
                         |true|false|nil|\[[^\]]*\]|\{[^}]*\})
                         (?=$|[\s,:(])''', re.X)


def literal_of(comment):
    """The Ruby literal a "# =>" comment begins with, or None."""
    m = LITERAL.match(comment)
    if not m:
        return None
    lit = m.group("lit")
    if "..." in re.sub(r'"(?:[^"\\]|\\.)*"', '""', lit):
        return None  # an elided list is prose
    return lit


def with_value_checks(code):
    """code, each checked line's value compared with its literal; the
    script prints "ok" or what differed, one word a checked line."""
    out, checks = ["__doc_results = []"], 0
    for n, line in enumerate(code.splitlines(), 1):
        stmt, sep, comment = line.partition("# =>")
        lit = literal_of(comment) if sep and stmt.strip() else None
        if lit is None:
            out.append(line)
            continue
        checks += 1
        out.append(f"__doc_value = begin; {stmt.strip()}; end")
        out.append(f"__doc_results << (__doc_value == ({lit}) ? 'ok' : "
                   f"\"line{n}:#{{__doc_value.inspect}}\")")
    out.append('get_server_class.rputs __doc_results.join(" ")')
    return "\n".join(out) + "\n", checks


def run_checked(server_get, checks):
    r = server_get("/doc")
    assert r.status_code == 200, r.text
    assert r.text.split() == ["ok"] * checks


def both_servers(apache, nginx, script):
    """The script as the handler of /doc on both servers."""
    a = apache("<Location /doc>\n    mrubyHandlerMiddle {dir}/doc.rb\n"
               "</Location>\n", files={"doc.rb": script})
    n = nginx("location /doc { mruby_content_handler {dir}/doc.rb; }\n",
              files={"doc.rb": script})
    return a, n


# --- the examples ---

@runs("readme-apache")
@runs("readme-hello")
def run_readme(apache, nginx, redis_server):
    conf = example("readme-apache").replace("/var/www/", "{dir}/")
    a = apache(conf, files={"hello.rb": example("readme-hello")})
    assert a.get("/hello").text == ("Hello mod_mruby World! You asked for "
                                    "/hello\n")
    n = nginx("location /hello { mruby_content_handler {dir}/hello.rb; }",
              files={"hello.rb": example("readme-hello")})
    assert n.get("/hello").text == ("Hello ngx_mruby World! You asked for "
                                    "/hello\n")


@runs("apache-load")
def run_apache_load(apache, nginx, redis_server):
    conf = (example("apache-load")
            .replace("/usr/lib/apache2/modules/mod_mruby.so",
                     harness.MOD_MRUBY)
            .replace("/var/www/", "{dir}/"))
    a = apache(conf, mruby=False, files={"hello.rb": example("readme-hello")})
    assert a.get("/hello").text.startswith("Hello mod_mruby World!")


def metrics_counts_one_run(server, phase):
    """/hi answers, and /metrics counts its one run in phase."""
    assert server.get("/hi").status_code == 200
    r = server.get("/metrics")
    assert r.status_code == 200
    assert f'phase="{phase}"}} 1\n' in r.text


@runs("nginx-metrics-location")
def run_nginx_metrics_location(apache, nginx, redis_server):
    metrics_counts_one_run(nginx(
        example("nginx-metrics-location")
        + "\nlocation /hi { mruby_content_handler_code 'Nginx.rputs 1'; }"),
        "content")


@runs("nginx-slow-log")
def run_nginx_slow_log(apache, nginx, redis_server):
    n = nginx(example("nginx-slow-log"))
    assert n.get("/api").text == "late"
    n.wait_log("ms waiting), over the slow-run log's 50 ms")


@runs("metrics-from-a-script")
def run_metrics_from_a_script(apache, nginx, redis_server):
    script, checks = with_value_checks(example("metrics-from-a-script"))
    work = ('raise ArgumentError if get_server_class::Request.new.args == '
            '"fail"\n')
    a = apache("<Location /doc>\n    mrubyHandlerMiddle {dir}/doc.rb\n"
               "</Location>\n<Location /work>\n"
               "    mrubyHandlerMiddle {dir}/work.rb\n</Location>\n",
               files={"doc.rb": script, "work.rb": work})
    n = nginx("location /doc { mruby_content_handler {dir}/doc.rb; }\n"
              "location /work { mruby_content_handler {dir}/work.rb; }\n",
              files={"doc.rb": script, "work.rb": work})
    for s in (a, n):
        for args in ("", "fail", ""):
            s.get("/work?" + args)
        run_checked(s.get, checks)


@runs("apache-metrics-location")
def run_apache_metrics_location(apache, nginx, redis_server):
    metrics_counts_one_run(apache(
        example("apache-metrics-location")
        + "\n<Location /hi>\n    SetHandler mruby-native-script\n"
        "    mrubyHandlerCode 'Apache.rputs 1'\n</Location>"), "handler")


@runs("apache-main-guard")
def run_apache_main_guard(apache, nginx, redis_server):
    a = apache("<Directory {docroot}>\n    mrubyFixupsMiddle {dir}/cors.rb\n"
               "</Directory>\n", files={"cors.rb": example("apache-main-guard")},
               docs={"index.html": "home\n"})
    r = a.get("/")
    assert r.text == "home\n"
    assert r.raw.headers.getlist("Access-Control-Allow-Origin") == ["*"]


@runs("apache-error-document")
def run_apache_error_document(apache, nginx, redis_server):
    a = apache(example("apache-error-document"),
               docs={"403.html": "custom 403\n", "index.html": "home\n"})
    r = a.get("/index.html")
    assert (r.status_code, r.text) == (403, "custom 403\n")


@runs("apache-authn")
@runs("apache-authn-script")
def run_apache_authn(apache, nginx, redis_server):
    conf = example("apache-authn").replace("/etc/apache2/ruby/", "{dir}/")
    a = apache(conf, files={"check_password.rb":
                            example("apache-authn-script")},
               docs={"private/index.html": "private\n"})
    assert a.get("/private/").status_code == 401
    assert a.get("/private/", auth=("alice", "wrong")).status_code == 401
    assert a.get("/private/", auth=("alice", "secret")).text == "private\n"


@runs("hello-both")
def run_hello_both(apache, nginx, redis_server):
    a, n = both_servers(apache, nginx, example("hello-both"))
    assert a.get("/doc").text == "Hello mod_mruby World!"
    assert n.get("/doc").text == "Hello ngx_mruby World!"


@runs("nginx-hello-location")
def run_nginx_hello_location(apache, nginx, redis_server):
    n = nginx(example("nginx-hello-location"))
    assert n.get("/hello/").text == "Hello ngx_mruby World!"


def tcp_backend(payload):
    """A TCP server on a free port that sends payload to each client."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(10)

    def serve():
        try:
            while True:
                c, _ = srv.accept()
                c.sendall(payload)
                c.close()
        except OSError:
            pass
    threading.Thread(target=serve, daemon=True).start()
    return srv


@runs("nginx-load")
@runs("nginx-stream")
def run_nginx_load_and_stream(apache, nginx, redis_server):
    n = nginx(example("nginx-hello-location"), mruby=False, start=False)
    backend = tcp_backend(b"from backend\n")
    try:
        load = (example("nginx-load")
                .replace("/path/to/build/", harness.BUILD + "/")
                .replace("modules/ngx_stream_module.so", n.stream_module()))
        stream = (example("nginx-stream")
                  .replace("127.0.0.1:9000", "127.0.0.1:{port2}")
                  .replace("127.0.0.1:9001",
                           f"127.0.0.1:{backend.getsockname()[1]}"))
        n.main_conf = load + stream
        n.start()
        assert n.get("/hello/").text == "Hello ngx_mruby World!"
        with socket.create_connection(("127.0.0.1", n.port2), 10) as c:
            assert c.makefile("rb").read() == b"from backend\n"
    finally:
        backend.close()


@runs("nginx-enable-links")
def run_nginx_enable_links(apache, nginx, redis_server):
    """The ln commands, into a modules-enabled directory of the test's own
    next to Debian's 50-mod-stream.conf, then nginx -t and a request."""
    n = nginx("location /hello/ { mruby_content_handler_code "
              "'Nginx.rputs \"hi\"'; }", mruby=False, start=False)
    available = os.path.join(n.dir, "modules-available")
    enabled = os.path.join(n.dir, "modules-enabled")
    os.makedirs(available)
    os.makedirs(enabled)
    for conf in ("mod-http-mruby.conf", "mod-stream-mruby.conf"):
        with open(os.path.join(REPO, "src", "nginx", conf)) as f:
            text = f.read().replace("modules/", harness.BUILD + "/")
        with open(os.path.join(available, conf), "w") as f:
            f.write(text)
    with open(os.path.join(enabled, "50-mod-stream.conf"), "w") as f:
        f.write(f"load_module {n.stream_module()};\n")
    for line in example("nginx-enable-links").splitlines():
        cmd = (line.replace("/usr/share/nginx/modules-available", available)
               .replace("/etc/nginx/modules-enabled", enabled))
        subprocess.run(cmd.split(), check=True)
    n.main_conf = ("include {dir}/modules-enabled/*.conf;\n"
                   "stream { server { listen 127.0.0.1:{port2};\n"
                   "  mruby_stream_code 'Nginx.return Nginx::Stream::OK';\n"
                   "  proxy_pass 127.0.0.1:{port3}; } }\n")
    rc, out = n.configtest()
    assert rc == 0, out
    n.start()
    assert n.get("/hello/").text == "hi"


@runs("nginx-body-filter")
def run_nginx_body_filter(apache, nginx, redis_server):
    n = nginx(start=False)
    n.conf = ("upstream backend { server 127.0.0.1:{port2}; }\n"
              "server { listen 127.0.0.1:{port2};\n"
              "  location / { return 200 'see http://example.com/'; } }\n"
              "server { listen 127.0.0.1:{port};\n"
              + example("nginx-body-filter") + "}\n")
    n.start()
    assert n.get("/").text == "see https://example.com/"


@runs("nginx-async")
def run_nginx_async(apache, nginx, redis_server):
    n = nginx("upstream backend { server 127.0.0.1:{port2}; }\n"
              "server { listen 127.0.0.1:{port2};\n"
              "  location /users { return 200 'user $arg_id;'; }\n"
              "  location /orders { return 200 'orders of $arg_user'; } }\n"
              "server { listen 127.0.0.1:{port}; root {docroot};\n"
              "  location /api/ { proxy_pass http://backend/; }\n"
              "  location /doc { mruby_content_handler {dir}/doc.rb; } }\n",
              files={"doc.rb": example("nginx-async")})
    r = n.get("/doc")
    assert (r.status_code, r.text) == (200, "user 7;orders of 7" + "42\n")


@runs("nginx-redis-async")
def run_nginx_redis_async(apache, nginx, redis_server):
    """The example, with the test's Redis port; an item pushed while it
    waits is what it answers."""
    n = nginx("location /doc { mruby_content_handler {dir}/doc.rb; }",
              files={"doc.rb": example("nginx-redis-async").replace(
                  "6379", str(redis_server.port))})
    assert n.get("/doc").text == "none"
    redis_server.command("RPUSH", "jobs", "job-1")
    assert n.get("/doc").text == "job-1"


@runs("nginx-auth-request")
def run_nginx_auth_request(apache, nginx, redis_server):
    n = nginx(example("nginx-auth-request"),
              docs={"private/page.html": "private\n"})
    assert n.get("/private/page.html").status_code == 403
    r = n.get("/private/page.html", headers={"X-Key": "k"})
    assert (r.status_code, r.text) == (200, "private\n")


@runs("nginx-internal")
def run_nginx_internal(apache, nginx, redis_server):
    n = nginx(example("nginx-internal"),
              docs={"403.html": "custom 403\n", "index.html": "home\n"})
    r = n.get("/")
    assert (r.status_code, r.text) == (403, "custom 403\n")


def make_cert(server, base, cn):
    key, crt = f"{server.dir}/{base}.key", f"{server.dir}/{base}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-days", "2", "-subj", f"/CN={cn}",
                    "-keyout", key, "-out", crt],
                   check=True, capture_output=True)
    os.chmod(key, 0o644)  # the worker (www-data) reads it at handshake time
    with open(crt) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def served_cert(port, name):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as s:
            return s.getpeercert(binary_form=True)


@runs("nginx-tls")
def run_nginx_tls(apache, nginx, redis_server):
    conf = (example("nginx-tls")
            .replace("listen 443 ssl;", "listen 127.0.0.1:{port} ssl;")
            .replace("/etc/ssl/", "{dir}/"))
    n = nginx(conf, start=False)
    default = make_cert(n, "default", "default.example")
    a = make_cert(n, "a", "a.example")
    n.start()
    assert served_cert(n.port, "a.example") == a
    assert served_cert(n.port, "b.example") == default


def error_line_pattern(line, n):
    """A sample log line of the docs as a pattern for n's log: its path,
    pid and connection number are n's, "..." anything."""
    return (re.escape(line.replace("/srv/", n.dir + "/"))
            .replace(r"\.\.\.", ".*")
            .replace("1234\\#1234", r"\d+\#\d+").replace("1234#1234",
                                                         r"\d+#\d+")
            .replace(r"\*5", r"\*\d+"))


@runs("nginx-error-line")
def run_nginx_error_line(apache, nginx, redis_server):
    n = nginx("location / { mruby_content_handler {dir}/boom.rb; }",
              files={"boom.rb": 'x = 1\ny = 2\nraise ArgumentError, '
                                '"it broke"\n'}, loglevel="info")
    assert n.get("/").status_code == 500
    sample = example("nginx-error-line").strip()
    n.wait_log("it broke")
    assert re.search(error_line_pattern(sample, n), n.error_log()), \
        (sample, n.error_log()[-500:])


@runs("nginx-error-line-debug")
def run_nginx_error_line_debug(apache, nginx, redis_server):
    n = nginx("location / { mruby_content_handler {dir}/boom.rb; }",
              files={"boom.rb": 'def check(x)\n  x = 1\n  raise '
                                'ArgumentError, "it broke"\nend\n\n'
                                'y = 2\ncheck(y)\n'}, loglevel="debug")
    assert n.get("/").status_code == 500
    n.wait_log("it broke")
    log = [line for line in n.error_log().splitlines()
           if "[error]" in line]
    sample = example("nginx-error-line-debug").strip().splitlines()
    assert len(log) == len(sample), log
    for want, got in zip(sample, log):
        assert re.search(error_line_pattern(want, n), got), (want, got)


@runs("rack-hello")
def run_rack_hello(apache, nginx, redis_server):
    a, n = both_servers(apache, nginx, example("rack-hello"))
    assert a.get("/doc").text == "Hello /doc\n"
    assert n.get("/doc").text == "Hello /doc\n"


@runs("shared-dict-api")
def run_shared_dict_api(apache, nginx, redis_server):
    script, checks = with_value_checks(example("shared-dict-api"))
    assert checks >= 6
    a = apache("mrubySharedDict cache 1m\n<Location /doc>\n"
               "    mrubyHandlerMiddle {dir}/doc.rb\n</Location>\n",
               files={"doc.rb": script})
    run_checked(a.get, checks)
    n = nginx("mruby_shared_dict cache 1m;\n"
              "server { listen 127.0.0.1:{port}; root {docroot};\n"
              "  location /doc { mruby_content_handler {dir}/doc.rb; } }\n",
              files={"doc.rb": script})
    run_checked(n.get, checks)


@runs("cache-api")
def run_cache_api(apache, nginx, redis_server):
    # the filename: in a directory the workers' user may write
    d = harness.make_www_dir("mruby-cache-doc-")
    os.chown(d, pwd.getpwnam("www-data").pw_uid, -1)
    try:
        script, checks = with_value_checks(
            example("cache-api").replace("/tmp/store.lmc", d + "/store.lmc"))
        assert checks >= 3
        a, n = both_servers(apache, nginx, script)
        run_checked(a.get, checks)
        run_checked(n.get, checks)
    finally:
        shutil.rmtree(d)


@runs("redis-api")
def run_redis_api(apache, nginx, redis_server):
    script, checks = with_value_checks(
        example("redis-api").replace("6379", str(redis_server.port)))
    assert checks >= 5
    a = apache("<Location /doc>\n    mrubyHandlerMiddle {dir}/doc.rb\n"
               "</Location>\n", files={"doc.rb": script})
    run_checked(a.get, checks)
    redis_server.command("FLUSHALL")
    n = nginx("location /doc { mruby_content_handler {dir}/doc.rb; }",
              files={"doc.rb": script})
    run_checked(n.get, checks)


def run_on_servers(apache, nginx, servers, name, addresses, least):
    """Example name on both servers against servers (harness.RedisCluster
    or RedisSentinel, started here), each "host:port" of the example
    replaced with one of addresses(servers)."""
    servers.start()
    try:
        script = example(name)
        for ours, theirs in zip(re.findall(r"127\.0\.0\.1:\d+", script),
                                addresses(servers)):
            script = script.replace(ours, theirs)
        script, checks = with_value_checks(script)
        assert checks >= least
        a, n = both_servers(apache, nginx, script)
        run_checked(a.get, checks)
        run_checked(n.get, checks)
    finally:
        servers.stop()
    servers.remove()


@runs("redis-cluster-api")
def run_redis_cluster_api(apache, nginx, redis_server):
    run_on_servers(apache, nginx, harness.RedisCluster("cluster-doc"),
                   "redis-cluster-api", harness.RedisCluster.seeds, 5)


@runs("redis-sentinel-api")
def run_redis_sentinel_api(apache, nginx, redis_server):
    run_on_servers(apache, nginx, harness.RedisSentinel("sentinel-doc"),
                   "redis-sentinel-api", harness.RedisSentinel.addresses, 4)


def runner_ids():
    """Each test once, named by the examples it runs."""
    by_fn = {}
    for name, fn in RUNNERS.items():
        by_fn.setdefault(fn, []).append(name)
    return sorted(("+".join(sorted(names)), fn)
                  for fn, names in by_fn.items())


@pytest.mark.parametrize("names,runner", runner_ids(),
                         ids=[n for n, _ in runner_ids()])
def test_doc_example(names, runner, request):
    missing = [n for n in names.split("+") if n not in EXAMPLES]
    assert not missing, f"no block marked <!-- example: NAME --> for {missing}"
    redis = (request.getfixturevalue("redis_server")
             if "redis" in names else None)
    runner(request.getfixturevalue("apache"), request.getfixturevalue("nginx"),
           redis)
