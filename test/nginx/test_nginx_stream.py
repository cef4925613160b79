"""ngx_mruby stream module: scripts in the access phase of TCP servers."""

import socket


def talk(port):
    """Connects, reads until the server closes; b"" if it closed at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data, s.getsockname()[1]


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
    n = nginx(stream_conf="""
server {
    listen 127.0.0.1:{port2};
    mruby_stream_code 'raise "stream broke"';
    return "never\\n";
}""")
    data, _ = talk(n.port2)
    assert data == b""
    n.wait_log("mruby_stream: RuntimeError: stream broke")
    # the worker lives on
    data, _ = talk(n.port2)
    assert data == b""
    assert len(n.worker_pids()) == 1


def test_stream_syntax_error_fails_configtest(nginx):
    n = nginx(stream_conf="""
server {
    listen 127.0.0.1:{port2};
    mruby_stream_code 'def (';
    return "x";
}""", start=False)
    rc, out = n.configtest()
    assert rc != 0 and n.conf_path in out
