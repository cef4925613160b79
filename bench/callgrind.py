"""Instructions per hello-world request, the way docs/architecture.md ("Where
the time goes") measures them: callgrind on one server process (Apache
`-X` with the prefork MPM; nginx with `master_process off`), one keep-alive
connection, and the difference between a server life of 1,000 requests and
one of 3,000, divided by 2,000 (start-up and shutdown cancel out).  The
figure does not move with the machine's load, unlike `make bench`.

    MRUBY_BUILD=build build/venv/bin/python bench/callgrind.py apache cache
    (servers: apache, nginx; cases: cache, inline, regexp: a cached routing
    script making ten regexp tests of the URI, then hello world; alloc: a
    cached script building an array of 1,000 strings, so that the GC runs,
    then hello world)

Compare two builds by running it once with each MRUBY_BUILD.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402
import requests  # noqa: E402

BODY = "hello world\n"
SCRIPT = {"apache": 'Apache.rputs "hello world\\n"\n',
          "nginx": 'Nginx.rputs "hello world\\n"\n'}
# ten tests of the URI as a router makes them (three match /hello), and
# one capture read through $1
ROUTE = """\
u = {cls}::Request.new.uri
n = 0
n += 1 if u =~ /\\A\\/static\\//
n += 1 if u =~ /\\.(css|js|png|jpg)\\z/
n += 1 if u =~ /\\A\\/api\\/v\\d+\\//
n += 1 if u =~ /\\/users\\/(\\d+)/
n += 1 if u =~ /\\A\\/admin/i
n += 1 if u =~ /lo\\z/
n += 1 if u =~ /\\/login/
n += 1 if u =~ /\\A\\/(hel+)o/ && $1.size == 4
n += 1 if u =~ /\\A\\/health\\z/
n += 1 if u =~ /h.l/
{cls}.rputs "hello world\\n" if n == 3
"""
ALLOC = """\
a = Array.new(1000) {{ |i| "s" + i.to_s }}
{cls}.rputs "hello world\\n" if a.size == 1000
"""

APACHE = {
    "cache": "<Location /hello>\n"
             "    mrubyHandlerMiddle {dir}/hello.rb cache\n</Location>\n",
    "inline": "<Location /hello>\n    SetHandler mruby-native-script\n"
              "    mrubyHandlerCode 'Apache.rputs \"hello world\\n\"'\n"
              "</Location>\n",
    "regexp": "<Location /hello>\n"
              "    mrubyHandlerMiddle {dir}/route.rb cache\n</Location>\n",
    "alloc": "<Location /hello>\n"
             "    mrubyHandlerMiddle {dir}/alloc.rb cache\n</Location>\n",
}
NGINX = {
    "cache": "mruby_content_handler {dir}/hello.rb cache;",
    "inline": "mruby_content_handler_code 'Nginx.rputs \"hello world\\n\"';",
    "regexp": "mruby_content_handler {dir}/route.rb cache;",
    "alloc": "mruby_content_handler {dir}/alloc.rb cache;",
}


def server(kind, case):
    """(harness server, written but not started; the command to run)."""
    if kind == "apache":
        s = harness.Apache(APACHE[case], mpm="prefork", access_log=False,
                           loglevel="warn")
        s.write("hello.rb", SCRIPT[kind])
        s.write("route.rb", ROUTE.format(cls="Apache"))
        s.write("alloc.rb", ALLOC.format(cls="Apache"))
        s.generate()
        return s, [harness.APACHE_BIN, "-f", s.conf_path, "-X"]

    s = harness.Nginx("location = /hello {\n    %s\n}\n" % NGINX[case],
                      access_log=False, loglevel="warn")
    s.write("hello.rb", SCRIPT[kind])
    s.write("route.rb", ROUTE.format(cls="Nginx"))
    s.write("alloc.rb", ALLOC.format(cls="Nginx"))
    s.generate()
    with open(s.conf_path) as f:
        conf = f.read().replace("master_process on;", "master_process off;")
    with open(s.conf_path, "w") as f:
        f.write(conf)
    return s, s.command()


def instructions(s, cmd, n):
    """Instructions of a whole server life that served n requests (and the
    one that found it up) on one keep-alive connection."""
    out = os.path.join(s.dir, f"callgrind.{n}")
    # Apache -X becomes www-data; callgrind writes at exit as that user
    open(out, "w").close()
    os.chmod(out, 0o666)
    shutil.chown(out, "www-data", "www-data")

    p = subprocess.Popen(["valgrind", "--tool=callgrind",
                          f"--callgrind-out-file={out}"] + cmd,
                         env=s.env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{s.port}/hello"
    session = requests.Session()
    session.trust_env = False
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if session.get(url, timeout=30).status_code == 200:
                    break
            except requests.ConnectionError:
                if time.monotonic() > deadline or p.poll() is not None:
                    raise
                time.sleep(0.2)
        for _ in range(n):
            r = session.get(url, timeout=30)
            if r.text != BODY:
                raise RuntimeError(f"unexpected answer: {r.status_code} "
                                   f"{r.text[:200]!r}")
    finally:
        session.close()
        os.kill(p.pid, signal.SIGTERM)
        p.wait(120)

    with open(out) as f:
        m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
    if m is None:
        raise RuntimeError(f"no totals in {out}")
    return int(m.group(1))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("apache", "nginx") \
            or sys.argv[2] not in APACHE:
        sys.exit(__doc__)
    kind, case = sys.argv[1:]
    s, cmd = server(kind, case)
    try:
        low = instructions(s, cmd, 1000)
        high = instructions(s, cmd, 3000)
    finally:
        s.remove()
    print(f"{kind} {case} ({harness.BUILD}): "
          f"{(high - low) / 2000:,.0f} instructions per request")


if __name__ == "__main__":
    main()
