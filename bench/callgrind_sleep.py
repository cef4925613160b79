#!/usr/bin/env python3
"""Instructions per request that sleeps, ngx_mruby against lua-nginx-module.

The recipe of docs/architecture.md ("Where the time goes", as
bench/callgrind_stat.py runs it): nginx as one process under valgrind
--tool=callgrind, one keep-alive connection, the instructions of 900
requests minus those of 300, over 600; each request sleeps 1 ms
(`Nginx::Async.sleep 1` on a coroutine, `ngx.sleep(0.001)` on a Lua
coroutine) and answers "ok".  Independent of the machine's load.

    python3 bench/callgrind_sleep.py [mruby] [lua]
"""

import sys

import valgrind

import harness

LUA_MODULES = ["/usr/lib/nginx/modules/ndk_http_module.so",
               "/usr/lib/nginx/modules/ngx_http_lua_module.so"]
CONF = ("location /mruby { mruby_content_handler_code "
        "'Nginx::Async.sleep 1; Nginx.rputs \"ok\"'; }\n"
        "location /lua { content_by_lua_block "
        "{ ngx.sleep(0.001) ngx.print(\"ok\") } }\n")


def callgrind_run(path, n):
    """Instructions of a whole nginx run that answers n requests."""
    s = harness.Nginx(CONF, modules=LUA_MODULES, access_log=False,
                      loglevel="warn")
    url = s.url(path)

    def request(http, k):
        r = http.get(url, timeout=60)
        assert r.status_code == 200 and r.text == "ok", r.status_code

    counts = valgrind.life(s, valgrind.one_process(s), n, request)
    s.remove()
    return counts


def main():
    for name in sys.argv[1:] or ["mruby", "lua"]:
        per, = valgrind.per_request(
            lambda n: callgrind_run("/" + name, n), 300, 900)
        print(f"{name}: {per:,.0f} instructions per request")


if __name__ == "__main__":
    main()
