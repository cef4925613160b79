"""Instructions per hello-world request, the way docs/architecture.md ("Where
the time goes") measures them: callgrind on one server process (Apache
`-X` with the prefork MPM; nginx with `master_process off`), one keep-alive
connection, and the difference between a server life of 1,000 requests and
one of 3,000, divided by 2,000 (start-up and shutdown cancel out).  The
figure does not move with the machine's load, unlike `make bench`.

    MRUBY_BUILD=build build/venv/bin/python bench/callgrind.py apache cache
    (servers: apache, nginx; cases: cache, never (compiled on every
    request), inline, regexp: a cached routing
    script making ten regexp tests of the URI, then hello world; alloc: a
    cached script building an array of 1,000 strings, so that the GC runs,
    then hello world; typical: bench/typical.rb, cached, as make bench's
    section typical runs it, five request headers sent; typical_lua: the
    same script in Lua, bench/typical.lua on lua-nginx-module,
    bench/typical_mod_lua.lua on mod_lua)

Compare two builds by running it once with each MRUBY_BUILD.
"""

import sys

import run
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
    "never": "<Location /hello>\n    mrubyCodeCache never\n"
             "    mrubyHandlerMiddle {dir}/hello.rb\n</Location>\n",
    "inline": "<Location /hello>\n    SetHandler mruby-native-script\n"
              "    mrubyHandlerCode 'Apache.rputs \"hello world\\n\"'\n"
              "</Location>\n",
    "regexp": "<Location /hello>\n"
              "    mrubyHandlerMiddle {dir}/route.rb cache\n</Location>\n",
    "alloc": "<Location /hello>\n"
             "    mrubyHandlerMiddle {dir}/alloc.rb cache\n</Location>\n",
    "typical": "mrubySharedDict typical 1m\n<Location /hello>\n"
               "    mrubyHandlerMiddle {dir}/typical.rb cache\n</Location>\n",
    "typical_lua": "LuaScope server 1 64\nLuaCodeCache forever\n"
                   "LuaMapHandler ^/hello$ {dir}/typical.lua\n",
}
NGINX = {
    "cache": "mruby_content_handler {dir}/hello.rb cache;",
    "never": "mruby_cache never;\n    mruby_content_handler {dir}/hello.rb;",
    "inline": "mruby_content_handler_code 'Nginx.rputs \"hello world\\n\"';",
    "regexp": "mruby_content_handler {dir}/route.rb cache;",
    "alloc": "mruby_content_handler {dir}/alloc.rb cache;",
    "typical": "mruby_content_handler {dir}/typical.rb cache;",
    "typical_lua": "default_type text/plain;\n"
                   "    content_by_lua_file {dir}/typical.lua;",
}
# what the http block needs beside the server
NGINX_HTTP = {"typical": "mruby_shared_dict typical 1m;\n",
              "typical_lua": "lua_shared_dict typical 1m;\n"}
LUA = {"apache": "typical_mod_lua.lua", "nginx": "typical.lua"}


def server(kind, case):
    """(harness server, written but not started; the command to run)."""
    lua = case == "typical_lua"
    if kind == "apache":
        s = harness.Apache(APACHE[case], mpm="prefork", access_log=False,
                           loglevel="warn", mruby=not lua,
                           modules=["lua"] if lua else ())
    else:
        location = "location = /hello {\n    %s\n}\n" % NGINX[case]
        if case in NGINX_HTTP:
            location = (NGINX_HTTP[case] + "server {\n    listen "
                        "127.0.0.1:{port};\n    server_name localhost;\n"
                        + location + "}\n")
        s = harness.Nginx(location, access_log=False, loglevel="warn",
                          mruby=not lua, modules=run.NGX_LUA if lua else ())
    s.write("hello.rb", SCRIPT[kind])
    s.write("route.rb", ROUTE.format(cls=CLASS[kind]))
    s.write("alloc.rb", ALLOC.format(cls=CLASS[kind]))
    s.write("typical.rb", run.typical_rb(kind))
    s.write("typical.lua", run.bench_file(LUA[kind]))
    return s, valgrind.one_process(s)


def hello(http, url):
    r = http.get(url, timeout=30)
    if r.text != BODY:
        raise RuntimeError(f"unexpected answer: {r.status_code} "
                           f"{r.text[:200]!r}")


def typical(http, url):
    r = http.get(url, headers=run.TYPICAL_HEADERS, timeout=30)
    if r.status_code != 200 or not run.typical_check(r.content):
        raise RuntimeError(f"unexpected answer: {r.status_code} "
                           f"{r.text[:200]!r}")


def instructions(s, cmd, n, case):
    """Instructions of the serving thread in a whole server life that
    served n requests of case on one keep-alive connection.  That
    thread's only: the run clock's (src/core/mrb_run_budget.c) counts
    with the time, not the requests, and a life under valgrind is long."""
    url = s.url("/hello")
    get = typical if case.startswith("typical") else hello
    return valgrind.life(s, cmd, n, lambda http, k: get(http, url),
                         threads=True)[0]


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("apache", "nginx") \
            or sys.argv[2] not in APACHE:
        sys.exit(__doc__)
    kind, case = sys.argv[1:]
    s, cmd = server(kind, case)
    try:
        low = instructions(s, cmd, 1000, case)
        high = instructions(s, cmd, 3000, case)
    finally:
        s.remove()
    print(f"{kind} {case} ({harness.BUILD}): "
          f"{(high - low) / 2000:,.0f} instructions per request")


if __name__ == "__main__":
    main()
