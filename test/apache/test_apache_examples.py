"""The Apache examples (examples/<name>/apache.conf), among them those of
the works README.md cites, each as written, on a real Apache."""

import concurrent.futures
import os
import shutil
import time

import pytest

import harness

EXAMPLES = os.path.join(harness.REPO, "examples")


def example_conf(name, docroot):
    """An example's apache.conf with its placeholders filled in."""
    with open(os.path.join(EXAMPLES, name, "apache.conf")) as f:
        text = f.read()
    return (text.replace("@DIR@", os.path.join(EXAMPLES, name))
                .replace("@DOCROOT@", docroot))


def start_examples(apache, names, mpm="event", extra="", **kw):
    """One Apache with the named examples loaded, as `make run` does: from
    copies its www-data workers can read wherever the checkout is (root's
    own home is mode 700)."""
    a = apache(start=False, mpm=mpm, **kw)
    a.conf = "\n".join(harness.setup_example(a, n) for n in names) + extra
    a.start()
    return a


def apache_examples():
    return sorted(n for n in os.listdir(EXAMPLES)
                  if os.path.isfile(os.path.join(EXAMPLES, n, "apache.conf")))


def test_every_example_has_a_readme():
    for name in apache_examples():
        readme = os.path.join(EXAMPLES, name, "README.md")
        assert os.path.isfile(readme), f"{name} has no README.md"
        with open(readme) as f:
            assert f.readline().strip(), f"{name}: README.md starts empty"


def test_all_examples_load_into_one_server(apache):
    """What `make run` does: every example's snippet in one Apache."""
    a = start_examples(apache, apache_examples())
    assert a.get("/hello/").text == "Hello mod_mruby World!"
    assert "[mruby:error]" not in a.error_log()


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_hello(apache, mpm):
    a = start_examples(apache, ["hello"], mpm=mpm)
    r = a.get("/hello/")
    assert r.status_code == 200
    assert r.text == "Hello mod_mruby World!"


def test_slides_slide30_as_written(apache):
    """The slide-30 script itself, with its if/elsif on server_name."""
    a = apache("<Location /s30>\n  mrubyHandlerMiddle {dir}/slide30.rb\n"
               "</Location>", files={"slide30.rb": """\
if server_name == "NGINX"
  Server = Nginx
elsif server_name == "Apache"
  Server = Apache
end

Server::rputs "Hello #{Server::module_name} World!"
"""})
    assert a.get("/s30").text == "Hello mod_mruby World!"


def test_translate_name_example(apache):
    a = start_examples(apache, ["translate_name"])
    for uri in ("/translate_name/", "/translate_name/a/b/c",
                "/translate_name/x.php?y=1"):
        r = a.get(uri)
        assert r.status_code == 200, uri
        assert "redirect.html: served for every URI" in r.text
        assert r.headers["Content-Type"].startswith("text/html")
    # outside its <Location> nothing is translated
    assert a.get("/elsewhere").status_code == 404


def test_paper_fig6_fig7_as_written(apache, tmpdir_www):
    """Fig. 6 at server level and Fig. 7 verbatim but for the file path."""
    target = os.path.join(tmpdir_www, "redirect.html")
    with open(target, "w") as f:
        f.write("the one file\n")
    os.chmod(target, 0o644)
    a = apache(f"mrubyTranslateNameMiddle {{dir}}/sample.rb\n"
               f"<Directory {tmpdir_www}>\n  Require all granted\n"
               f"</Directory>",
               files={"sample.rb": f"""\
r = Apache::Request.new

r.filename = "{target}"

Apache::return Apache::OK
"""})
    for uri in ("/", "/index.html", "/no/such/path"):
        r = a.get(uri)
        assert r.status_code == 200, uri
        assert r.text == "the one file\n"


def test_global_remove(apache):
    a = start_examples(apache, ["global_remove"])
    r = a.get("/global_remove/")
    assert r.status_code == 200
    assert r.text == "before: $hoge = 1\nafter:  $hoge = nil\n"


def test_handler_cache_with_and_without_cache(apache, tmpdir_www):
    """Slide 23: the stat script sees an edit at once, the cached one
    keeps its startup bytecode."""
    d = os.path.join(tmpdir_www, "handler_cache")
    shutil.copytree(os.path.join(EXAMPLES, "handler_cache"), d)
    script = os.path.join(d, "test.rb")
    a = apache(start=False)
    a.conf = example_conf("handler_cache", a.docroot).replace(
        os.path.join(EXAMPLES, "handler_cache"), d)
    a.start()

    r = a.get("/handler_cache/")
    assert r.status_code == 200
    assert r.text == "Hello from test.rb\nuri: /handler_cache/\n"
    assert r.headers["Content-Type"] == "text/plain"
    r = a.get("/handler_cache/cached/")
    assert r.text == "Hello from test.rb\nuri: /handler_cache/cached/\n"

    with open(script, "w") as f:
        f.write('Apache.rputs "edited"\n')
    assert a.get_edited("/handler_cache/", "edited").text == "edited"
    assert a.get("/handler_cache/cached/").text.startswith(
        "Hello from test.rb")


def test_native_script_one_line(apache):
    a = start_examples(apache, ["native_script"])
    r = a.get("/native_script/")
    assert r.status_code == 200
    assert r.text == "hello native mruby world"


def test_native_script_multi_line(apache):
    a = start_examples(apache, ["native_script"])
    r = a.get("/native_script/multi")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/html")
    # Apache mapped the URI to the longest path that exists, plus one
    # component (the rest is path_info)
    before = os.path.join(a.docroot, "native_script")
    assert r.text == (
        "Test Start.<br><br>Request Class Test<br>"
        f"filename = {before}<br>uri = /native_script/multi<br>"
        "---- request_rec changed ----<br>"
        "filename = /var/www/html/index.html<br>uri = /index.html<br><br>")


def test_reverse_proxy(apache):
    a = start_examples(apache, ["reverse_proxy"])
    r = a.get("/reverse_proxy/app/hello/world?x=1")
    assert r.status_code == 200, a.error_log()[-2000:]
    lines = dict(line.split(": ", 1) for line in r.text.splitlines())
    assert lines["backend"] in ("backend1", "backend2")
    assert lines["uri"] == f"/reverse_proxy/{lines['backend']}/hello/world"
    assert lines["args"] == "x=1"
    # it went through mod_proxy: the backend saw a proxied request
    assert lines["x-forwarded-for"] == "127.0.0.1"
    # the same client keeps its backend
    again = a.get("/reverse_proxy/app/other").text
    assert f"backend: {lines['backend']}\n" in again


def test_vhost(apache):
    a = start_examples(apache, ["vhost"])
    r = a.get("/vhost/", headers={"Host": "site-a.example"})
    assert r.status_code == 200
    assert "site A" in r.text
    r = a.get("/vhost/", headers={"Host": "SITE-B.example"})
    assert "site B" in r.text
    r = a.get("/vhost/about.txt", headers={"Host": "site-b.example"})
    assert r.text == "about site B\n"
    assert a.get("/vhost/", headers={"Host": "nobody.example"}
                 ).status_code == 404
    assert a.get("/vhost/about.txt", headers={"Host": "site-a.example"}
                 ).status_code == 404


def test_redirect(apache):
    a = start_examples(apache, ["redirect"])
    r = a.get("/redirect/old/page.html")
    assert r.status_code == 301
    assert r.headers["Location"].endswith("/redirect/new/page.html")
    r = a.get("/redirect/", headers={"User-Agent": "Mobile Safari"})
    assert r.status_code == 302
    assert r.headers["Location"].endswith("/redirect/mobile/")
    r = a.get("/redirect/?lang=ja")
    assert r.status_code == 302
    assert r.headers["Location"].endswith("/redirect/new/ja.html")
    r = a.get("/redirect/new/page.html")
    assert r.status_code == 200
    assert "new page" in r.text
    r = a.get("/redirect/old/page.html", allow_redirects=True)
    assert r.status_code == 200
    assert "new page" in r.text


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_basic_auth(apache, mpm):
    a = start_examples(apache, ["basic_auth"], mpm=mpm)
    r = a.get("/basic_auth/")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == 'Basic realm="mod_mruby example"'
    r = a.get("/basic_auth/", auth=("alice", "wonderland"))
    assert r.status_code == 200
    assert r.text == "Hello alice\n"
    assert a.get("/basic_auth/", auth=("bob", "builder")).text == \
        "Hello bob\n"
    assert a.get("/basic_auth/", auth=("alice", "wrong")).status_code == 401
    assert a.get("/basic_auth/", auth=("carol", "x")).status_code == 401
    log = a.error_log()
    assert "user alice: authentication failure" in log
    assert "user carol not found" in log


def test_load_aware(apache):
    a = start_examples(apache, ["load_aware"])
    r = a.get("/load_aware/")
    assert r.status_code == 200
    assert r.text.startswith("full page: 1 busy workers, ")
    assert "Retry-After" not in r.headers

    # six workers held busy: the page turns light
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        slow = [pool.submit(a.get, "/load_aware/slow") for _ in range(6)]
        # while they sleep (2 s each), however late a loaded machine
        # starts them
        light = None
        while not all(f.done() for f in slow):
            r = a.get("/load_aware/")
            if r.text.startswith("light page"):
                light = r
                break
            time.sleep(0.05)
        assert all(f.result().text == "slow done\n" for f in slow)
    assert light is not None, "never saw the light page under load"
    assert light.headers["Retry-After"] == "5"


def test_header_rewrite(apache):
    a = start_examples(apache, ["header_rewrite"])
    r = a.get("/header_rewrite/", headers={"User-Agent": "curl/8",
                                          "X-Debug": "1"})
    assert r.status_code == 200
    assert "header_rewrite example" in r.text
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["X-Client-Kind"] == "cli"
    assert r.headers["X-Debug-Removed"] == "1"
    r = a.get("/header_rewrite/", headers={"User-Agent": "Firefox"})
    assert r.headers["X-Client-Kind"] == "other"
    assert "X-Debug-Removed" not in r.headers


def test_header_rewrite_hides_the_request_header(apache):
    """What runs after the rewrite no longer sees X-Debug."""
    a = start_examples(apache, ["header_rewrite"], extra="""
<Location /header_rewrite/show>
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Headers_in.new["X-Debug"].inspect'
</Location>
""")
    assert a.get("/header_rewrite/show", headers={"X-Debug": "1"}).text == \
        "nil"
