"""ngx_mruby: mruby_ssl_handshake_handler chooses the certificate by SNI."""

import json
import os
import socket
import ssl
import subprocess

import pytest

from harness import nginx_at_least, read_until_closed


def make_cert(server, name):
    """A self-signed certificate for name, made now with openssl."""
    key, crt = f"{server.dir}/{name}.key", f"{server.dir}/{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-keyout", key, "-out", crt],
                   check=True, capture_output=True)
    os.chmod(key, 0o644)  # the workers (www-data) read it at handshake time
    with open(crt) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def handshake(port, name, path="/"):
    """The certificate the server shows for SNI name, and a response."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as s:
            der = s.getpeercert(binary_form=True)
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {name}\r\n\r\n".encode())
            data = read_until_closed(s)
    return der, data.split(b"\r\n\r\n", 1)[1].decode()


HANDSHAKE = r"""
ssl = Nginx::SSL.new
if ssl.servername == "info.test" || ssl.servername.empty?
  Nginx::SSL.log Nginx::LOG_NOTICE,
                 "ssl-info [#{ssl.servername}] #{ssl.tls_version} #{ssl.local_port}"
end
case ssl.servername
when "a.test"
  ssl.certificate = "{dir}/a.test.crt"
  ssl.certificate_key = "{dir}/a.test.key"
when "b.test"
  ssl.certificate_data = File.read("{dir}/b.test.crt")
  ssl.certificate_key_data = File.read("{dir}/b.test.key")
when "broken.test"
  ssl.certificate = "{dir}/nonexistent.crt"
when "errors.test"
  [["certificate_data=", "no PEM"], ["certificate_key_data=", "no PEM"],
   ["certificate_key=", "{dir}/nonexistent.key"]].each do |m, v|
    begin
      ssl.send(m, v)
    rescue RuntimeError => e
      Nginx.errlogger Nginx::LOG_ERR, "rescued: #{e.message}"
    end
  end
  ssl.certificate = "{dir}/a.test.crt"
  ssl.certificate_key = "{dir}/a.test.key"
when "nul.test"
  # an embedded NUL: the path is refused, not cut short at the NUL
  ssl.certificate = "{dir}/b.test.crt\0.ignored"
  ssl.certificate_key = "{dir}/b.test.key"
end
"""


@pytest.fixture
def tls_nginx(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {dir}/default.test.crt;
    ssl_certificate_key {dir}/default.test.key;
    mruby_ssl_handshake_handler {dir}/handshake.rb;
    location / { mruby_content_handler_code 'r = Nginx::Request.new; Nginx.rputs "#{r.scheme} #{r.hostname}"'; }
    location /metrics { mruby_metrics; }
}""", start=False)
    n.certs = {name: make_cert(n, name)
               for name in ("default.test", "a.test", "b.test")}
    n.write("handshake.rb", n.subst(HANDSHAKE))
    n.start()
    return n


def test_certificate_chosen_by_sni(tls_nginx):
    n = tls_nginx
    der, body = handshake(n.port, "a.test")
    assert der == n.certs["a.test"]
    assert body == "https a.test"

    der, body = handshake(n.port, "b.test")
    assert der == n.certs["b.test"]   # from *_data=

    der, _ = handshake(n.port, "other.test")
    assert der == n.certs["default.test"]


def test_handshake_script_error_fails_the_handshake(tls_nginx):
    n = tls_nginx
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(n.port, "broken.test")
    n.wait_log("mruby_ssl_handshake_handler: RuntimeError: "
               "Nginx::SSL#certificate=")
    # and the next client is served
    der, _ = handshake(n.port, "a.test")
    assert der == n.certs["a.test"]


def test_path_with_a_nul_is_refused(tls_nginx):
    n = tls_nginx
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(n.port, "nul.test")
    n.wait_log("mruby_ssl_handshake_handler: ArgumentError: "
               "Nginx::SSL#certificate=: the path contains a NUL byte")


def test_setter_errors_can_be_rescued(tls_nginx):
    n = tls_nginx
    der, _ = handshake(n.port, "errors.test")
    assert der == n.certs["a.test"]
    log = n.wait_log("rescued: Nginx::SSL#certificate_key=")
    rescued = [l.split("rescued: ", 1)[1] for l in log.splitlines()
               if "rescued: " in l]
    assert len(rescued) == 3, rescued
    assert rescued[0].startswith("Nginx::SSL#certificate_data= : ")
    assert rescued[1].startswith("Nginx::SSL#certificate_key_data= : ")
    assert rescued[2].startswith(
        "Nginx::SSL#certificate_key= %s/nonexistent.key: " % n.dir), rescued


def test_handshake_handler_needs_tls(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_ssl_handshake_handler_code '1';
}""", start=False)
    rc, out = n.configtest()
    assert rc != 0 and "needs TLS" in out


def test_handshake_info_as_the_original_gives_it(tls_nginx):
    """tls_version, local_port, servername ("" without SNI) and
    Nginx::SSL.log, the original's names."""
    n = tls_nginx
    # nginx's default ssl_protocols stop at TLSv1.2 before 1.23.4
    tls = "TLSv1.3" if nginx_at_least("1.23.4") else "TLSv1.2"
    handshake(n.port, "info.test")
    n.wait_log(f"ssl-info [info.test] {tls} {n.port}")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", n.port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:     # no server_hostname: no SNI
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            read_until_closed(s)
    n.wait_log(f"ssl-info [] {tls} {n.port}")


def test_handshakes_are_counted_in_the_metrics(tls_nginx):
    """Each handshake is a run of the script in phase ssl_handshake, and
    the one whose script raised is an exception of its class."""
    n = tls_nginx
    for name in ("a.test", "b.test", "other.test"):
        handshake(n.port, name)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(n.port, "broken.test")

    _, text = handshake(n.port, "a.test", "/metrics?format=json")
    row, = [x for x in json.loads(text)["scripts"]
            if x["phase"] == "ssl_handshake"]
    assert row["script"] == f"{n.dir}/handshake.rb"
    assert row["runs"] == 5     # with the handshake of this request
    assert row["exceptions"] == {"RuntimeError": 1}


BUDGETS = """
server {
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {dir}/default.test.crt;
    ssl_certificate_key {dir}/default.test.key;
    mruby_run_timeout 200ms;
    mruby_run_memory 1m;
    mruby_ssl_handshake_handler_code '
        case Nginx::SSL.new.servername
        when "loop.test" then loop {}
        when "big.test" then "x" * (8 << 20)
        end';
    location / { mruby_content_handler_code 'Nginx.rputs Process.pid.to_s'; }
}"""


@pytest.mark.parametrize("name,line", [
    ("loop.test", "Nginx::RunTimeout: the run's time budget of 200 ms is "
                  "spent"),
    ("big.test", "NoMemoryError: past the run's memory budget of 1048576 "
                 "bytes")])
def test_handshake_script_has_the_servers_budgets(nginx, name, line):
    """The server's mruby_run_timeout and mruby_run_memory bound the
    handshake script: a runaway one fails its handshake with one log line,
    and the worker goes on with the next."""
    n = nginx(BUDGETS, start=False)
    make_cert(n, "default.test")
    n.start()
    _, pid = handshake(n.port, "other.test")

    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(n.port, name)
    log = n.wait_log("mruby_ssl_handshake_handler: ")
    assert line in log, log[-2000:]

    _, again = handshake(n.port, "other.test")
    assert again == pid
