"""A translate_name script hands a request to mod_proxy the original
mod_mruby's way (its own suite's /proxy location and its
mod_mruby_reverse_proxy example): it sets r.handler, r.proxyreq and
r.filename = "proxy:URL" and returns nothing, which answers OK as
mod_proxy's own translate_name does for such a request (declining let the
core refuse it with 403).  The proxy URL is checked like a redirect target
before mod_proxy sends it to the backend."""

import pytest

# The original suite's htdocs/proxy_request.rb, with the backend's port.
PROXY_REQUEST = """\
backend = "http://127.0.0.1:BACKEND"
uri = "/proxy-reply"
r = Apache::Request.new

r.handler  = "proxy-server"
r.proxyreq = Apache::PROXYREQ_REVERSE
r.filename = "proxy:" + backend + uri
"""

# A URL with a space, and no escaping by mod_proxy: refused.
PROXY_SPACE = """\
r = Apache::Request.new
r.notes["proxy-nocanon"] = "1"
r.handler  = "proxy-server"
r.proxyreq = Apache::PROXYREQ_REVERSE
r.filename = "proxy:http://127.0.0.1:BACKEND/proxy-reply HTTP/1.0"
"""


def backend_and_front(apache, mpm):
    backend = apache("""
<Location /proxy-reply>
    mrubyHandlerMiddleCode 'Apache.errlogger Apache::APLOG_NOTICE, "backend asked"; Apache.rputs "proxy reply success"'
</Location>
""")
    files = {name: code.replace("BACKEND", str(backend.port))
             for name, code in (("proxy_request.rb", PROXY_REQUEST),
                                ("proxy_space.rb", PROXY_SPACE))}
    front = apache("""
<Location /proxy>
    mrubyTranslateNameMiddle {dir}/proxy_request.rb
</Location>
<Location /space>
    mrubyTranslateNameMiddle {dir}/proxy_space.rb
</Location>
""", mpm=mpm, modules=("proxy_http",), files=files)
    return backend, front


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_translate_name_script_hands_the_request_to_mod_proxy(apache, mpm):
    backend, front = backend_and_front(apache, mpm)
    r = front.get("/proxy")
    assert (r.status_code, r.text) == (200, "proxy reply success")
    backend.wait_log("backend asked")


def test_proxy_url_with_a_space_is_refused(apache):
    backend, front = backend_and_front(apache, "event")
    assert front.get("/space").status_code == 500
    front.wait_log("ArgumentError")
    front.wait_log("filename=")
    assert "backend asked" not in backend.error_log()
