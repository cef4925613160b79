"""ngx_mruby: what the docs promise about where scripts apply and what
their results do (docs/nginx.md: directives, return values, body filter,
reloads), each checked as a client sees it."""

import subprocess

import pytest


def code(ruby):
    """An inline script as an nginx string argument."""
    return "'" + ruby.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.mark.parametrize("phase", ["rewrite", "access"])
def test_output_in_rewrite_or_access_is_the_response(nginx, phase):
    """rputs in a rewrite or access script is the response: the request
    ends there, and the content script never runs."""
    n = nginx(f"""
location / {{
    mruby_{phase}_handler_code {code('Nginx.rputs "from ' + phase + '"')};
    mruby_content_handler_code {code(
        'Nginx.errlogger Nginx::LOG_ERR, "content ran"; Nginx.rputs "content"')};
}}""")
    r = n.get("/")
    assert (r.status_code, r.text) == (200, f"from {phase}")
    assert r.headers["Content-Length"] == str(len(f"from {phase}"))
    assert n.get("/").text == f"from {phase}"   # the connection went on
    assert "content ran" not in n.error_log()


def test_handlers_at_http_and_server_level_apply_below(nginx):
    """A handler set at http or server level applies to every location
    below that does not set its own; one that does, overrides it."""
    n = nginx(f"""
mruby_rewrite_handler_code {code(
    'Nginx::Request.new.headers_out["X-From-Http"] = "1"')};
server {{
    listen 127.0.0.1:{{port}};
    mruby_content_handler_code {code('Nginx.rputs "server content"')};
    location /inherits {{ }}
    location /own {{
        mruby_content_handler_code {code('Nginx.rputs "own content"')};
    }}
    location /own-rewrite {{
        mruby_rewrite_handler_code {code(
            'Nginx::Request.new.headers_out["X-From-Location"] = "1"')};
    }}
}}""")
    r = n.get("/inherits")
    assert (r.text, r.headers.get("X-From-Http")) == ("server content", "1")
    r = n.get("/own")
    assert (r.text, r.headers.get("X-From-Http")) == ("own content", "1")
    r = n.get("/own-rewrite")
    assert r.text == "server content"
    assert r.headers.get("X-From-Location") == "1"
    assert "X-From-Http" not in r.headers


def test_body_filter_after_send_header(nginx):
    """The body filter sees the whole body of a response whose header the
    content script sent itself (chunked), and the response goes out with
    the new Content-Length."""
    n = nginx(f"""
location / {{
    mruby_content_handler_code {code(
        'Nginx.send_header 200; Nginx.rputs "abc"; Nginx.rputs "def"')};
    mruby_output_body_filter_code {code(
        'f = Nginx::Filter.new; f.body = f.body.upcase + "!"')};
}}""")
    r = n.get("/")
    assert (r.status_code, r.text) == (200, "ABCDEF!")
    assert r.headers["Content-Length"] == "7"
    assert "Transfer-Encoding" not in r.headers


def test_subrequests_pass_the_body_filter_unfiltered(nginx):
    """An SSI include is a subrequest: the included location's body filter
    leaves it alone, while a direct request to it is filtered."""
    n = nginx(f"""
location /page {{ ssi on; default_type text/html; }}
location /inc {{
    mruby_content_handler_code {code('Nginx.rputs "included"')};
    mruby_output_body_filter_code {code(
        'f = Nginx::Filter.new; f.body = f.body.upcase')};
}}""", docs={"page": '[<!--# include virtual="/inc" -->]'})
    assert n.get("/inc").text == "INCLUDED"
    assert n.get("/page").text == "[included]"


DICT_ERROR = code('''
begin
  Nginx::SharedDict.new("gone")
  Nginx.rputs "found"
rescue Nginx::SharedDict::Error => e
  Nginx.rputs "#{e.class}: #{e.message}"
end''')


def test_dictionary_dropped_by_a_reload_raises(nginx):
    n = nginx(f"""
mruby_shared_dict gone 1m;
server {{
    listen 127.0.0.1:{{port}};
    location / {{ mruby_content_handler_code {DICT_ERROR}; }}
}}""")
    assert n.get("/").text == "found"
    n.conf = n.conf.replace("mruby_shared_dict gone 1m;", "")
    n.reload()
    r = n.get("/")
    assert r.status_code == 200
    assert r.text.startswith("Nginx::SharedDict::Error: ")
    assert '"gone"' in r.text


def test_mruby_init_does_not_run_under_configtest(nginx):
    n = nginx("mruby_init_code 'Nginx.errlogger Nginx::LOG_NOTICE, "
              "\"init ran\"';\nserver { listen 127.0.0.1:{port}; }",
              start=False)
    rc, out = n.configtest()
    assert rc == 0, out
    assert "init ran" not in out + n.error_log()
    n.start()
    n.wait_log("init ran")


def curl_h2(n, path, *args):
    """curl over cleartext HTTP/2 (prior knowledge): (status, headers text,
    body)."""
    p = subprocess.run(
        ["curl", "-s", "--http2-prior-knowledge", "-D", "-", "--max-time",
         "10", *args, n.url(path)], capture_output=True, timeout=30)
    head, _, body = p.stdout.partition(b"\r\n\r\n")
    return head.decode(errors="replace"), body


BAD_HEADER = code('Nginx::Request.new.headers_out["X-Bad"] = "a\r\nb: c"; '
                  'Nginx.rputs "never"')


def test_status_and_headers_over_http2(nginx):
    """The status and header paths under HTTP/2: a status and headers a
    script sets arrive, with and without Nginx.send_header; a header value
    with CR/LF is refused before it reaches the wire."""
    n = nginx(f"""
server {{
    listen 127.0.0.1:{{port}} http2;
    location /ok {{
        mruby_content_handler_code {code(
            'r = Nginx::Request.new; r.headers_out["X-Set"] = "yes"; '
            'Nginx.status_code = 201; Nginx.rputs "made"')};
    }}
    location /bad {{
        mruby_content_handler_code {BAD_HEADER};
    }}
    location /send {{
        mruby_content_handler_code {code(
            'Nginx.send_header 203; Nginx.rputs "sent"')};
    }}
}}""")
    head, body = curl_h2(n, "/ok")
    assert head.startswith("HTTP/2 201"), head
    assert "x-set: yes" in head.lower()
    assert body == b"made"
    head, body = curl_h2(n, "/send")
    assert head.startswith("HTTP/2 203"), head
    assert body == b"sent"
    head, body = curl_h2(n, "/bad")
    assert head.startswith("HTTP/2 500"), head
    assert b"never" not in body
    n.wait_log("X-Bad")
