"""The original ngx_mruby's API rows that were missing or different here
(../shared/spec/compat/ngx_mruby.md), each as a script written for the
original would use it."""

import os


def code(ruby):
    """An inline script as an nginx string argument."""
    return "'" + ruby.replace("\\", "\\\\").replace("'", "\\'") + "'"


CONSTANTS = r'''
Nginx.rputs [Nginx::TRUE, Nginx::FALSE, Nginx::HTTP_NGINX_CODES,
              Nginx.server_version == Nginx.nginx_version,
              Nginx.var.class, Nginx::Request.new.args,
              Nginx::Request.new.read_body == Nginx::OK].inspect
'''


def test_constants_version_var_and_empty_args(nginx):
    n = nginx("location / { mruby_content_handler {dir}/c.rb; }",
              files={"c.rb": CONSTANTS})
    assert n.get("/").text == '["1", "0", 494, true, Nginx::Var, "", true]'
    assert n.get("/?a=1").text.endswith(', "a=1", true]')


SETTERS = r'''
r = Nginx::Request.new
r.method = "PURGE"
r.protocol = "HTTP/1.0"
r.unparsed_uri = "/rewritten?x=1"
r.request_line = "PURGE /rewritten?x=1 HTTP/1.0"
v = Nginx::Var.new
Nginx.rputs [r.method, v.request_method, r.protocol, r.unparsed_uri,
             v.request_uri, r.request_line, v.request].join("|")
begin
  r.method = "BAD METHOD"
rescue ArgumentError => e
  Nginx.rputs "|#{e.message}"
end
'''


def test_request_line_setters(nginx):
    n = nginx("location / { mruby_content_handler {dir}/s.rb; }",
              files={"s.rb": SETTERS})
    assert n.get("/orig").text == (
        "PURGE|PURGE|HTTP/1.0|/rewritten?x=1|/rewritten?x=1|"
        "PURGE /rewritten?x=1 HTTP/1.0|PURGE /rewritten?x=1 HTTP/1.0|"
        "invalid method= (want an RFC 9110 token)")


HEADERS = r'''
r = Nginx::Request.new
r.headers_out["X-Multi"] = ["a", "b", nil, 3]
Nginx.rputs [r.headers_in["X-Rep"], r.headers_in["X-One"],
             r.headers_in["X-None"], r.headers_in.user_agent,
             r.headers_out["X-Multi"]].inspect
'''


def test_repeated_headers_as_arrays(nginx):
    n = nginx("location / { mruby_content_handler {dir}/h.rb; }",
              files={"h.rb": HEADERS})
    import socket
    from harness import read_until_closed
    with socket.create_connection(("127.0.0.1", n.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.0\r\nX-Rep: 1\r\nX-Rep: 2\r\nX-One: o\r\n"
                  b"User-Agent: ua/1\r\n\r\n")
        data = read_until_closed(s).decode()
    head, _, body = data.partition("\r\n\r\n")
    assert body == '[["1", "2"], "o", nil, "ua/1", ["a", "b", "3"]]'
    assert [l for l in head.split("\r\n") if l.startswith("X-Multi")] == [
        "X-Multi: a", "X-Multi: b", "X-Multi: 3"]


def test_server_path_is_realpath_root(nginx):
    n = nginx("location / { mruby_content_handler_code "
              + code('s = Nginx::Server.new; Nginx.rputs "#{s.path}|#{s.prefix}"')
              + "; }")
    assert n.get("/").text == (f"{os.path.realpath(n.docroot)}|"
                               f"{n.dir}/")


def test_filter_output_with_an_argument_sets_the_body(nginx):
    n = nginx("location / { mruby_content_handler_code "
              + code('Nginx.rputs "orig"')
              + "; mruby_output_body_filter_code "
              + code('f = Nginx::Filter.new; f.output(f.output.upcase + "!")')
              + "; }\nlocation /n { mruby_content_handler_code "
              + code('Nginx.rputs "x"') + "; mruby_output_body_filter_code "
              + code('Nginx::Filter.new.body = 42') + "; }")
    assert n.get("/").text == "ORIG!"
    assert n.get("/n").text == "42"


UTILS = r'''
u = Nginx::Utils
Nginx.rputs [u.escape("a b/é~"), u.encode_parameters({"k" => "v w", :n => 1}),
             u.encode_parameters([["x", "y"]], ";", "'")].join("|")
'''


def test_utils(nginx):
    n = nginx("location / { mruby_content_handler {dir}/u.rb; }",
              files={"u.rb": UTILS})
    assert n.get("/").text == "a%20b%2F%C3%A9~|k=v%20w&n=1|x='y'"


def test_server_context_adds_listeners(nginx):
    """mruby_server_context_handler_code runs while the server block is
    read; Nginx::Server#add_listener adds its listen sockets there, and
    raises anywhere else."""
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_server_context_handler_code 's = Nginx::Server.new; s.add_listener(address: "127.0.0.1:{port2}"); s.add_listener({address: "127.0.0.1:{port3}"})';
    location / { mruby_content_handler_code 'Nginx.rputs "served"'; }
    location /late { mruby_content_handler_code 'Nginx::Server.new.add_listener(address: "127.0.0.1:1")'; }
}""")
    for port in (n.port, n.port2, n.port3):
        assert n.get("/", port=port).text == "served"
    assert n.get("/late").status_code == 500
    n.wait_log("Nginx::Server#add_listener: only while the configuration "
               "is read")


def test_server_context_bad_address_fails_configtest(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_server_context_handler_code 'Nginx::Server.new.add_listener(address: "127.0.0.1:notaport")';
}""", start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert ("Nginx::Server#add_listener: invalid port in "
            "\"127.0.0.1:notaport\"") in out, out


UPSTREAM = """
mruby_init_code 'Nginx::Upstream.new("other")';
upstream backend {
    server 127.0.0.1:{port2};
    mruby_upstream_keepalive 4;
}
upstream other { server 127.0.0.1:1; }
upstream two { server 127.0.0.1:1; server 127.0.0.1:2; }
server {
    listen 127.0.0.1:{port2};
    location / { return 200 "A $connection"; }
}
server {
    listen 127.0.0.1:{port3};
    location / { return 200 "B $connection"; }
}
server {
    listen 127.0.0.1:{port};
    location /proxy {
        proxy_pass http://backend;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
    }
    location /retarget {
        mruby_content_handler_code 'u = Nginx::Upstream.new("backend"); before = u.server; u.server = "127.0.0.1:{port3}"; Nginx.rputs "#{before}|#{u.server}|#{u.keepalive_cache}"';
    }
    location /errors { mruby_content_handler {dir}/errors.rb; }
}
"""

UPSTREAM_ERRORS = r'''
out = []
[-> { Nginx::Upstream.new("nope") }, -> { Nginx::Upstream.new("two") },
 -> { Nginx::Upstream.new("other").server = "localhost:80" },
 -> { Nginx::Upstream.new("other").keepalive_cache = 3 }].each do |f|
  begin
    f.call
    out << "no error"
  rescue Exception => e
    out << "#{e.class}: #{e.message}"
  end
end
o = Nginx::Upstream.new("other")
o.server = "127.0.0.2"
out << o.server << o.keepalive_cache
Nginx.rputs out.join("\n")
'''


def test_upstream_retarget_and_keepalive(nginx):
    """Nginx::Upstream#server= sends the requests proxied after it to the
    new address; mruby_upstream_keepalive keeps the backend connection
    (the same $connection answers twice)."""
    n = nginx(UPSTREAM, files={"errors.rb": UPSTREAM_ERRORS})
    first, second = n.get("/proxy").text, n.get("/proxy").text
    assert first.startswith("A ") and first == second
    assert n.get("/retarget").text == "127.0.0.1:%d|127.0.0.1:%d|4" % (
        n.port2, n.port3)
    first, second = n.get("/proxy").text, n.get("/proxy").text
    assert first.startswith("B ") and first == second
    assert n.get("/errors").text.split("\n") == [
        'ArgumentError: Nginx::Upstream: no upstream block "nope"',
        'ArgumentError: Nginx::Upstream: upstream "two" has 2 server '
        'addresses, Nginx::Upstream needs exactly one',
        'ArgumentError: Nginx::Upstream#server=: "localhost:80" is not an IP '
        'address with an optional port (no DNS lookup at request time)',
        "NotImplementedError: Nginx::Upstream#keepalive_cache=: nginx sizes "
        "an upstream's keepalive cache when it loads the configuration; set "
        "it with mruby_upstream_keepalive",
        "127.0.0.2:80", "0"]
    # the master's upstreams are replaced on reload: refused there
    n.wait_log("Nginx::Upstream: only in a worker (a request script or an "
               "init-worker script)")
    # a reload's workers start from the configured server, and re-target
    n.reload()
    assert n.get("/proxy").text.startswith("A ")
    assert n.get("/retarget").text == "127.0.0.1:%d|127.0.0.1:%d|4" % (
        n.port2, n.port3)
    assert n.get("/proxy").text.startswith("B ")


def test_upstream_keepalive_next_to_keepalive_is_duplicate(nginx):
    n = nginx("""
upstream u { server 127.0.0.1:1; keepalive 2; mruby_upstream_keepalive 4; }
server { listen 127.0.0.1:{port}; }""", start=False)
    rc, out = n.configtest()
    assert rc != 0 and '"mruby_upstream_keepalive" directive is duplicate' \
        in out, out


def test_output_filter_is_refused_with_its_successors(nginx):
    """The original removed mruby_output_filter(_code) and refused it
    with a pointer to the header and body filters; so does this module."""
    for directive in ("mruby_output_filter {dir}/f.rb",
                      "mruby_output_filter_code 'x'"):
        n = nginx("location / { %s; }" % directive, start=False)
        rc, out = n.configtest()
        assert rc != 0
        assert ('"%s" directive was removed (as in the original ngx_mruby): '
                'use '
                'mruby_output_body_filter(_code) for the body and '
                'mruby_output_header_filter(_code) for the header'
                % directive.split()[0]) in out, out
