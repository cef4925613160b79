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

import sys

import valgrind

import harness

BODY = "hello world\n"
CLASS = {"apache": "Apache", "nginx": "Nginx"}
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
    else:
        s = harness.Nginx("location = /hello {\n    %s\n}\n" % NGINX[case],
                          access_log=False, loglevel="warn")
    s.write("hello.rb", SCRIPT[kind])
    s.write("route.rb", ROUTE.format(cls=CLASS[kind]))
    s.write("alloc.rb", ALLOC.format(cls=CLASS[kind]))
    return s, valgrind.one_process(s)


def hello(http, url):
    r = http.get(url, timeout=30)
    if r.text != BODY:
        raise RuntimeError(f"unexpected answer: {r.status_code} "
                           f"{r.text[:200]!r}")


def instructions(s, cmd, n):
    """Instructions of a whole server life that served n hello worlds on
    one keep-alive connection."""
    url = s.url("/hello")
    return valgrind.life(s, cmd, n, lambda http, k: hello(http, url))[0]


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
