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

import os
import subprocess
import sys

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))
sys.path.insert(0, HERE)

import callgrind_stat  # noqa: E402
import harness  # noqa: E402

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
    cmd = callgrind_stat.command(s, "nginx")
    out = os.path.join(s.dir, "cg.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--dump-instr=no"] + cmd,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        callgrind_stat.wait_port(s.port)
        session = requests.Session()
        for _ in range(n):
            r = session.get(s.url(path), timeout=60)
            assert r.status_code == 200 and r.text == "ok", r.status_code
    finally:
        proc.terminate()
        proc.wait(120)
    ir = callgrind_stat.total_ir(out)
    s.remove()
    return ir


def main():
    for name in sys.argv[1:] or ["mruby", "lua"]:
        per = (callgrind_run("/" + name, 900)
               - callgrind_run("/" + name, 300)) / 600
        print(f"{name}: {per:,.0f} instructions per request")


if __name__ == "__main__":
    main()
