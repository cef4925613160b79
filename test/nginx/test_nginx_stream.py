"""ngx_mruby stream module: scripts in the access phase of TCP servers."""

import re
import socket

from nginx_client import read_until_closed


def talk(port):
    """Connects, reads until the server closes; b"" if it closed at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return read_until_closed(s), s.getsockname()[1]


def stream_server(code, reply="x"):
    """A stream server on port2 with one mruby_stream_code directive per
    item of code (Ruby quoted for nginx); it replies reply if let in."""
    return """
server {
    listen 127.0.0.1:{port2};
    %s
    return "%s\\n";
}""" % ("\n    ".join("mruby_stream_code %s;" % c for c in code), reply)


STREAM = """
mruby_stream_init_worker_code '$allowed_port = {port2}';
mruby_stream_exit_worker_code 'Nginx::Stream.log Nginx::Stream::LOG_NOTICE, "stream worker exits"';
server {
    listen 127.0.0.1:{port2};
    listen 127.0.0.1:{port3};
    mruby_stream {dir}/stream.rb;
    return "served $server_port\\n";
}
"""

SCRIPT = """
c = Nginx::Stream::Connection.new
Nginx::Stream.log Nginx::Stream::LOG_NOTICE,
  "stream #{c.remote_ip}:#{c.remote_port} -> #{c.local_ip}:#{c.local_port}"
if c.local_port == $allowed_port
  Nginx.return Nginx::Stream::OK
else
  Nginx.return Nginx::Stream::ABORT
end
"""


def test_stream_handler_accepts_and_denies(nginx):
    n = nginx(stream_conf=STREAM, files={"stream.rb": SCRIPT})
    data, my_port = talk(n.port2)
    assert data == b"served %d\n" % n.port2
    n.wait_log("stream 127.0.0.1:%d -> 127.0.0.1:%d" % (my_port, n.port2))

    data, _ = talk(n.port3)
    assert data == b""  # denied: closed without a word
    n.wait_log("-> 127.0.0.1:%d" % n.port3)  # the script ran, and denied

    n.stop()
    assert "stream worker exits" in n.error_log()


def test_stream_handler_error_closes_and_logs(nginx):
    n = nginx(stream_conf=stream_server(["'raise \"stream broke\"'"]))
    data, _ = talk(n.port2)
    assert data == b""
    n.wait_log("mruby_stream: RuntimeError: stream broke")
    # the worker lives on
    data, _ = talk(n.port2)
    assert data == b""
    assert len(n.worker_pids()) == 1


def test_stream_syntax_error_fails_configtest(nginx):
    n = nginx(stream_conf=stream_server(["'def ('"]), start=False)
    rc, out = n.configtest()
    assert rc != 0 and n.conf_path in out


def test_stream_handler_given_twice_is_a_config_error(nginx):
    n = nginx(stream_conf=stream_server(["'a = 1'", "'b = 2'"]), start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert re.search(r'"mruby_stream_code" directive is duplicate in '
                     + re.escape(n.conf_path), out), out


def test_stream_failing_init_worker_is_logged_and_worker_serves(nginx):
    n = nginx(stream_conf="mruby_stream_init_worker_code "
                          "'raise \"stream init_worker broke\"';"
                          + stream_server(["'Nginx.return Nginx::Stream::OK'"],
                                          "up"))
    data, _ = talk(n.port2)
    assert data == b"up\n"
    log = n.wait_log("stream init_worker broke")
    assert re.search(r"\[error\].* mruby: mruby_stream_init_worker: "
                     r"RuntimeError: stream init_worker broke", log), log


def test_stream_server_context_adds_listeners(nginx):
    """mruby_stream_server_context_code runs while the stream server block
    is read; Nginx::Stream.add_listener adds its listen sockets; a port
    the configuration listens on already is refused at config time."""
    n = nginx(stream_conf="""
server {
    mruby_stream_server_context_code 'Nginx::Stream.add_listener(address: "127.0.0.1:{port2}"); Nginx::Stream.add_listener({address: "127.0.0.1:{port3}"})';
    return "served $server_port\\n";
}""")
    assert talk(n.port2)[0] == b"served %d\n" % n.port2
    assert talk(n.port3)[0] == b"served %d\n" % n.port3

    n.stop()
    n.stream_conf = """
server {
    listen 127.0.0.1:{port2};
    mruby_stream_server_context_code 'Nginx::Stream.add_listener(address: "127.0.0.1:{port2}")';
    return "x";
}"""
    rc, out = n.configtest()
    assert rc != 0
    assert ('Nginx::Stream.add_listener: "127.0.0.1:%d" is listened on '
            'already' % n.port2) in out, out
