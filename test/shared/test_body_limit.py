"""A request body a script reads is held in memory: it is capped by the
server's own limit (LimitRequestBody, client_max_body_size) and by the
module's (mrubyRequestBodyLimit, mruby_request_body_limit; 1 MiB unless
configured), and a larger one is answered with 413, whether the client
sent a Content-Length or a chunked body."""

import pytest

SERVERS = ["apache", "nginx"]

READ = '''
Server = get_server_class
Server.rputs "read #{Server::Request.new.body.size}"
'''


def reader(kind, apache, nginx, limit=None, server_limit=None):
    """/t reads the request body; limit: the module's directive."""
    if kind == "apache":
        conf = "<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n"
        if limit is not None:
            conf += f"    mrubyRequestBodyLimit {limit}\n"
        if server_limit is not None:
            conf += f"    LimitRequestBody {server_limit}\n"
        return apache(conf + "</Location>\n", files={"t.rb": READ})
    conf = "location /t {\n    mruby_enable_read_request_body on;\n" \
           "    mruby_content_handler {dir}/t.rb;\n"
    conf += f"    client_max_body_size {server_limit or '10m'};\n"
    if limit is not None:
        conf += f"    mruby_request_body_limit {limit};\n"
    return nginx(conf + "}\n", files={"t.rb": READ})


def chunked(n):
    def gen():
        for _ in range(n // 500):
            yield b"x" * 500
    return gen()


@pytest.mark.parametrize("kind", SERVERS)
def test_module_limit_answers_413(kind, apache, nginx):
    s = reader(kind, apache, nginx, limit=1000)
    r = s.post("/t", data=b"x" * 1000)
    assert (r.status_code, r.text) == (200, "read 1000")
    r = s.post("/t", data=b"x" * 1001)
    assert r.status_code == 413, r.text
    r = s.post("/t", data=chunked(2000))
    assert r.status_code == 413, r.text
    r = s.post("/t", data=chunked(1000))
    assert (r.status_code, r.text) == (200, "read 1000")
    directive = ("mrubyRequestBodyLimit" if kind == "apache"
                 else "mruby_request_body_limit")
    assert f"is larger than {directive}" in s.error_log()


@pytest.mark.parametrize("kind", SERVERS)
def test_default_limit_is_one_mebibyte(kind, apache, nginx):
    """Apache's LimitRequestBody is 1 GiB by default: a script read all of
    it into memory, about three times over."""
    s = reader(kind, apache, nginx)
    r = s.post("/t", data=b"x" * (1 << 20))
    assert (r.status_code, r.text) == (200, f"read {1 << 20}")
    r = s.post("/t", data=b"x" * ((1 << 20) + 1))
    assert r.status_code == 413, r.text


@pytest.mark.parametrize("kind", SERVERS)
def test_server_limit_answers_413(kind, apache, nginx):
    """Apache's LimitRequestBody gave a 500 from r.body, not a 413."""
    s = reader(kind, apache, nginx, server_limit=100 if kind == "apache"
               else "100")
    assert s.post("/t", data=b"x" * 100).text == "read 100"
    assert s.post("/t", data=b"x" * 101).status_code == 413
    assert s.post("/t", data=chunked(1000)).status_code == 413


def test_apache_input_filter_limit(apache):
    a = apache("""
<Location /t>
    SetInputFilter mruby
    mrubyInputFilter {dir}/filter.rb
    mrubyRequestBodyLimit 1000
    mrubyHandlerMiddle {dir}/t.rb
</Location>
""", files={"t.rb": READ,
            "filter.rb": "f = Apache::Filter.new; f.body = f.body.upcase"})
    r = a.post("/t", data=b"x" * 1000)
    assert (r.status_code, r.text) == (200, "read 1000")
    assert a.post("/t", data=b"x" * 1001).status_code == 413
    assert a.post("/t", data=chunked(2000)).status_code == 413
    assert "mrubyInputFilter: the request body is larger than " \
           "mrubyRequestBodyLimit (1000)" in a.error_log()


def test_nginx_limit_before_a_rewrite_script(nginx):
    n = nginx("""
location /t {
    mruby_enable_read_request_body on;
    mruby_request_body_limit 1000;
    mruby_rewrite_handler_code 'Nginx.rputs "read #{Nginx::Request.new.body.size}"';
}""")
    assert n.post("/t", data=b"x" * 999).text == "read 999"
    assert n.post("/t", data=b"x" * 1001).status_code == 413
    assert n.post("/t", data=chunked(2000)).status_code == 413


@pytest.mark.parametrize("kind", SERVERS)
def test_body_filter_limit_answers_500_instead_of_holding_the_response(
        kind, apache, nginx):
    """A body filter holds the whole response for its script: past
    mrubyOutputFilterLimit / mruby_output_body_filter_limit (16 MiB unless
    configured) the response is a 500 with one log line, and one under it
    is filtered as usual."""
    filt = 'f = get_server_class::Filter.new; f.body = f.body.upcase'
    if kind == "apache":
        s = apache(f"""
<Location /f/>
    mrubyOutputFilterLimit 4096
    mrubyOutputFilter {{dir}}/f.rb
    SetOutputFilter mruby
</Location>
""", files={"f.rb": filt}, docs={"f/small": "x" * 4096,
                                  "f/big": "x" * 20000})
        line = ("mrubyOutputFilter: the response body is larger than "
                "mrubyOutputFilterLimit (4096 bytes): answered 500 instead")
    else:
        s = nginx(f"""
location /f/ {{
    mruby_output_body_filter_limit 4096;
    mruby_output_body_filter_code '{filt}';
}}""", docs={"f/small": "x" * 4096, "f/big": "x" * 20000})
        line = ("mruby body filter: the response body is larger than "
                "mruby_output_body_filter_limit (4096 bytes): answered 500 "
                "instead")
    r = s.get("/f/small")
    assert (r.status_code, r.text) == (200, "X" * 4096)
    r = s.get("/f/big")
    assert r.status_code == 500
    assert "x" * 100 not in r.text and "X" * 100 not in r.text
    s.wait_log(line)
    # the connection and the server go on
    assert s.get("/f/small").status_code == 200
