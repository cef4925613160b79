"""Kernel#rand (and Array#shuffle and #sample with it) draws different numbers in each
worker process, on nginx and Apache's prefork MPM, also where the workers
are copies of the interpreter that the startup scripts ran in (mruby_init,
mrubyPostConfig): mruby starts every Random in the same state, and every
worker used to draw the same numbers, restart after restart."""

import pytest

DRAW = "#{Process.pid} #{rand(1 << 30)}"


def draws_by_worker(s):
    """{worker pid: the numbers it drew}, over requests spread on the
    workers.  Workers seeded alike draw the same sequence, so the first
    numbers of each are the same: none may be shared."""
    draws = {}
    for r in s.get_spread("/r", count=24):
        assert r.status_code == 200, s.error_log()[-2000:]
        pid, n = r.text.split(" ")
        draws.setdefault(pid, set()).add(n)
    assert len(draws) >= 2, draws
    return list(draws.values())


def assert_no_worker_drew_anothers(s):
    draws = draws_by_worker(s)
    for i, mine in enumerate(draws):
        for theirs in draws[i + 1:]:
            assert not mine & theirs, draws


@pytest.mark.parametrize("startup", [False, True])
def test_nginx_workers_draw_their_own_numbers(nginx, startup):
    main = "mruby_init_code '$booted = 1';\n" if startup else ""
    s = nginx(main + "server {\n    listen 127.0.0.1:{port};\n"
              "    location /r { mruby_content_handler_code "
              f"'Nginx.rputs \"{DRAW}\"'; }}\n}}\n", workers=2)
    assert_no_worker_drew_anothers(s)


@pytest.mark.parametrize("startup", [False, True])
def test_apache_prefork_children_draw_their_own_numbers(apache, startup):
    main = "mrubyPostConfigMiddleCode '$booted = 1'\n" if startup else ""
    s = apache(main + "<Location /r>\n    mrubyHandlerMiddleCode "
               f"'Apache.rputs \"{DRAW}\"'\n</Location>\n", mpm="prefork")
    assert_no_worker_drew_anothers(s)
