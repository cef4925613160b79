"""One DSL: the examples that make sense on both servers run unchanged
under Apache and nginx, and answer the same."""

import os
import time

import pytest
import requests
from urllib.parse import urlsplit

import harness


def location_path(response):
    loc = response.headers.get("Location")
    if loc is None:
        return None
    u = urlsplit(loc)
    return u.path + ("?" + u.query if u.query else "")


@pytest.fixture
def both(apache, nginx):
    """both(name) -> (apache, nginx), each serving examples/<name>."""
    def make(name):
        a = apache(start=False)
        a.conf = harness.setup_example(a, name)
        a.start()
        n = nginx(start=False)
        n.conf = harness.setup_example(n, name)
        n.start()
        return a, n
    return make


def test_hello_slide30(both):
    a, n = both("hello")
    assert a.get("/hello/").text == "Hello mod_mruby World!"
    assert n.get("/hello/").text == "Hello ngx_mruby World!"


@pytest.mark.parametrize("path,headers,status,where", [
    ("/redirect/old/page.html", {}, 301, "/redirect/new/page.html"),
    ("/redirect/?lang=ja", {}, 302, "/redirect/new/ja.html"),
    ("/redirect/", {"User-Agent": "Mobile Safari"}, 302, "/redirect/mobile/"),
    ("/redirect/", {"User-Agent": "desktop"}, 200,
     "<html><body>redirect example: try /redirect/old/page.html</body>"
     "</html>\n"),
    ("/redirect/new/page.html", {}, 200,
     "<html><body>new page</body></html>\n"),
])
def test_redirect(both, path, headers, status, where):
    """where: the Location path of a redirect, or the body served."""
    a, n = both("redirect")
    for s in (a, n):
        r = s.get(path, headers=headers)
        assert r.status_code == status, s.name
        # nginx makes a Location path absolute (absolute_redirect): compare
        # paths
        assert (location_path(r) if status != 200 else r.text) == where, \
            s.name


def test_header_rewrite(both):
    a, n = both("header_rewrite")
    for s in (a, n):
        r = s.get("/header_rewrite/", headers={"X-Debug": "1",
                                               "User-Agent": "curl/8"})
        assert r.status_code == 200, s.name
        assert r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["X-Client-Kind"] == "cli"
        assert r.headers["X-Debug-Removed"] == "1"
    for s in (a, n):
        assert s.get("/header_rewrite/").text == (
            "<html><body>header_rewrite example</body></html>\n"), s.name


def test_basic_auth(both):
    a, n = both("basic_auth")
    for s in (a, n):
        r = s.get("/basic_auth/")
        assert r.status_code == 401, s.name
        assert r.headers["WWW-Authenticate"].startswith("Basic realm=")
        assert s.get("/basic_auth/", auth=("alice", "wrong")).status_code \
            == 401
        r = s.get("/basic_auth/", auth=("alice", "wonderland"))
        assert (r.status_code, r.text) == (200, "Hello alice\n"), s.name


def test_rack_app(both):
    a, n = both("rack_app")
    ra = a.get("/rack_app/hello?x=1", headers={"User-Agent": "ua/1"})
    rn = n.get("/rack_app/hello?x=1", headers={"User-Agent": "ua/1"})
    for r, module in ((ra, "mod_mruby"), (rn, "ngx_mruby")):
        assert r.status_code == 200
        assert r.text == ("Hello from %s\nGET /rack_app/hello?x=1\n"
                          "agent: ua/1\n" % module)
        assert r.headers["Content-Type"].startswith("text/plain")
        assert r.headers["X-Rack-App"] == "HelloRack"
        assert r.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]
    for s in (a, n):
        r = s.get("/rack_app/missing")
        assert (r.status_code, r.text) == (404, "no such page\n"), s.name


def test_stat_status(both):
    """A broken save of site.rb: the last version answers and the status
    page of the worker that ran it says why; fixed, it is current again.
    (One keep-alive connection: the list is the serving process's.)"""
    a, n = both("stat_status")
    for s in (a, n):
        site = os.path.join(s.dir, "examples", "stat_status", "site.rb")
        http = requests.Session()

        def get(path):
            return http.get(s.url(path), timeout=10).text

        def site_and_status(expect):
            """The site's answer and then the status page, once the status
            holds expect (Apache: once the watcher thread has read the
            edit, docs/apache.md; nginx: at once)."""
            deadline = time.monotonic() + 10
            while True:
                answer, status = get("/stat_status/site"), \
                    get("/stat_status/")
                if expect(status) or not s.edit_window \
                        or time.monotonic() > deadline:
                    return answer, status

        assert get("/stat_status/site") == "site, version 1\n"
        assert get("/stat_status/") == "all stat scripts current\n"
        with open(site, "w") as f:
            f.write("Server = get_server_class\nServer.rputs(\n")
        previous = f"{site}: serving previous version for "
        answer, status = site_and_status(lambda t: t.startswith(previous))
        assert answer == "site, version 1\n"
        assert status.startswith(previous), (s.name, status)
        assert f"{site}:3: syntax error" in status, status
        with open(site, "w") as f:
            f.write('Server = get_server_class\nServer.rputs "version 2\\n"\n')
        answer, status = site_and_status(
            lambda t: t == "all stat scripts current\n")
        assert answer == "version 2\n"
        assert status == "all stat scripts current\n"


def test_metrics_status(both):
    """The page counts every run of work.rb, with its exceptions and a
    plot whose rows add up to the runs; /metrics_status/metrics is
    Prometheus' format."""
    a, n = both("metrics_status")
    for s in (a, n):
        for args, status in (("", 200), ("fail", 500), ("slow", 200),
                             ("fail", 500), ("", 200)):
            assert s.get("/metrics_status/work?" + args).status_code \
                == status, s.name
        page = s.get("/metrics_status/").text
        work = os.path.join(s.dir, "examples", "metrics_status", "work.rb")
        head, = [line for line in page.splitlines()
                 if line.startswith(work + " (")]
        assert ": 5 runs, 2 5xx, mean " in head, page
        assert "  raised ArgumentError: 2" in page
        rows = page[page.index(head):].splitlines()[2:16]
        assert sum(int(r.split()[-2] if r.rstrip().endswith("#")
                       else r.split()[-1]) for r in rows) == 5, page
        assert "mruby_runs_total{" in s.get("/metrics_status/metrics").text
