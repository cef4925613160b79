"""One DSL: the examples that make sense on both servers run unchanged
under Apache and nginx, and answer the same."""

import os
import shutil

import pytest
from urllib.parse import urlsplit

from harness import REPO

EXAMPLES = os.path.join(REPO, "examples")


def setup_example(server, name):
    """Copies examples/<name> into the server's directory (readable by its
    workers), its htdocs into <docroot>/<name>/, and returns the server's
    snippet with the placeholders filled in."""
    src = os.path.join(EXAMPLES, name)
    dst = os.path.join(server.dir, "examples", name)
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(os.path.join(server.dir, "examples")):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    htdocs = os.path.join(dst, "htdocs")
    if os.path.isdir(htdocs):
        shutil.copytree(htdocs, os.path.join(server.docroot, name))
        for root, dirs, files in os.walk(server.docroot):
            os.chmod(root, 0o755)
    which = "apache.conf" if server.name == "apache" else "nginx.conf"
    with open(os.path.join(dst, which)) as f:
        snippet = f.read()
    return snippet.replace("@DIR@", dst).replace("@DOCROOT@", server.docroot)


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
        a.conf = setup_example(a, name)
        a.start()
        n = nginx(start=False)
        n.conf = setup_example(n, name)
        n.start()
        return a, n
    return make


def test_hello_slide30(both):
    a, n = both("hello")
    assert a.get("/hello/").text == "Hello mod_mruby World!"
    assert n.get("/hello/").text == "Hello ngx_mruby World!"


def test_same_script_file_on_both(both):
    # not a copy: the very same hello.rb
    a, n = both("hello")
    with open(os.path.join(a.dir, "examples/hello/hello.rb")) as fa, \
            open(os.path.join(EXAMPLES, "hello/hello.rb")) as fr, \
            open(os.path.join(n.dir, "examples/hello/hello.rb")) as fn:
        assert fa.read() == fr.read() == fn.read()


@pytest.mark.parametrize("path,headers", [
    ("/redirect/old/page.html", {}),
    ("/redirect/?lang=ja", {}),
    ("/redirect/", {"User-Agent": "Mobile Safari"}),
    ("/redirect/", {"User-Agent": "desktop"}),
    ("/redirect/new/page.html", {}),
])
def test_redirect(both, path, headers):
    a, n = both("redirect")
    ra, rn = a.get(path, headers=headers), n.get(path, headers=headers)
    assert ra.status_code == rn.status_code
    # nginx makes a Location path absolute (absolute_redirect): compare paths
    assert location_path(ra) == location_path(rn)
    if ra.status_code == 200:
        assert ra.text == rn.text


def test_redirect_codes(both):
    a, n = both("redirect")
    for s in (a, n):
        r = s.get("/redirect/old/page.html")
        assert r.status_code == 301
        assert r.headers["Location"].endswith("/redirect/new/page.html")
        r = s.get("/redirect/?lang=ja")
        assert r.status_code == 302
        assert r.headers["Location"].endswith("/redirect/new/ja.html")


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
    assert a.get("/header_rewrite/").text == n.get("/header_rewrite/").text


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
