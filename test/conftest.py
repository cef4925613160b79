"""pytest fixtures: real Apache, nginx and redis-server (see harness.py).

    def test_hello(apache):
        a = apache('mrubyHandlerMiddle {dir}/hello.rb',
                   files={'hello.rb': 'Apache.rputs "hi"'})
        assert a.get('/').text == 'hi'

    def test_hello_nginx(nginx):
        n = nginx('location / { mruby_content_handler_code \\'Nginx.rputs "hi"\\'; }')
        assert n.get('/').text == 'hi'

Factories return a started server (start=False: not started, e.g. for
configtest()).  files= writes {relpath: content} under .dir and docs= under
.docroot before the server starts; contents are written as given (no
placeholders: Ruby code has braces).  Every server is stopped at teardown,
even when the test failed; its directory is removed when the test passed
and kept (path in the report) when it failed.  A missing module fails the
test with a clear message: nothing is skipped silently.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import Apache, Nginx, Redis, HarnessError  # noqa: E402,F401

KEEP = os.environ.get("MRUBY_KEEP") == "1"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(request):
    for when in ("setup", "call"):
        rep = getattr(request.node, "rep_" + when, None)
        if rep is not None and rep.failed:
            return True
    return False


class _Servers:
    """Everything one test started, torn down in reverse order."""

    def __init__(self, request):
        self.request = request
        self.servers = []

    def add(self, server, files, docs, start):
        self.servers.append(server)
        for rel, content in (files or {}).items():
            server.write(rel, content)
        for rel, content in (docs or {}).items():
            server.write_doc(rel, content)
        if start:
            server.start()
        return server

    def teardown(self):
        failed = _failed(self.request)
        errors = []
        for s in reversed(self.servers):
            try:
                s.stop()
            except HarnessError as e:  # AddressSanitizer reports
                errors.append(str(e))
            if failed or KEEP or errors:
                tail = ""
                if hasattr(s, "error_log"):
                    tail = s.error_log()[-4000:]
                self.request.node.add_report_section(
                    "teardown", f"{s.__class__.__name__} {s.dir}",
                    f"kept {s.dir}\n--- error log (tail) ---\n{tail}")
            else:
                s.remove()
        if errors:
            pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture
def _servers(request):
    servers = _Servers(request)
    yield servers
    servers.teardown()


# A server a test starts without naming a log level logs at the most
# verbose one, so that the one run of the suite also runs every path that
# logs (a debug line that reads what nobody set crashes only there).
# Apache writes it all to logs/error.log; nginx its debug lines to
# logs/debug.log and the rest to logs/error.log at info, where the tests
# look for them.
APACHE_TEST_LOGLEVEL = "trace8"


@pytest.fixture
def apache(_servers):
    """Factory: apache(conf="", mpm="event", modules=(), files=None,
    docs=None, start=True, **kw) -> started harness.Apache."""
    def make(conf="", mpm="event", modules=(), files=None, docs=None,
             start=True, **kw):
        kw.setdefault("loglevel", APACHE_TEST_LOGLEVEL)
        return _servers.add(Apache(conf, mpm=mpm, modules=modules, **kw),
                            files, docs, start)
    return make


@pytest.fixture
def nginx(_servers):
    """Factory: nginx(conf="", main_conf="", stream_conf="", workers=1,
    files=None, docs=None, start=True, **kw) -> started harness.Nginx."""
    def make(conf="", main_conf="", stream_conf="", workers=1, files=None,
             docs=None, start=True, **kw):
        kw.setdefault("debug_log", "loglevel" not in kw)
        return _servers.add(Nginx(conf, main_conf=main_conf,
                                  stream_conf=stream_conf, workers=workers,
                                  **kw), files, docs, start)
    return make


@pytest.fixture
def redis_server(_servers):
    """A started redis-server; .host, .port, .url(), .command(*args)."""
    r = Redis()
    _servers.servers.append(r)
    r.start()
    return r


@pytest.fixture
def tmpdir_www():
    """A fresh 0755 directory under /tmp that www-data can read."""
    d = harness.make_www_dir("mruby-test-")
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)
