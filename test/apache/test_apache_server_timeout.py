"""Apache::Server#timeout= sets the server's Timeout for the rest of the
request, as in the original mod_mruby, whose own suite cuts a sleeping CGI
with it: the modules that wait on something (mod_cgi and mod_cgid for a
script's output) read it from the request's server.  Other requests keep
the configured Timeout (Timeout 30 in the harness's config)."""

import os
import subprocess

import pytest

# The original suite's /sleep.cgi location: fixups lowers the timeout to
# 2 s and logs what the getter then answers.
CONF = """
<Directory {docroot}/cgi>
    Options +ExecCGI
    AddHandler cgi-script .cgi
</Directory>
<Location /cgi/sleep.cgi>
    mrubyFixupsMiddleCode ' \\
      s = Apache::Server.new; \\
      was = s.timeout; \\
      s.timeout = 2_000_000; \\
      Apache.errlogger Apache::APLOG_NOTICE, "timeout #{was} -> #{s.timeout}"'
</Location>
<Location /now>
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Server.new.timeout.to_s'
</Location>
"""

# Answers after 6 s, beyond the 2 s the fixups allow it.
SLEEP_CGI = """\
#!/bin/sh
sleep 6
printf 'Content-Type: text/plain\\r\\n\\r\\nslept\\n'
"""


@pytest.mark.parametrize("mpm,cgi,cut", [
    ("event", "cgid", "Script timed out before returning headers"),
    ("prefork", "cgi", "Timeout waiting for output from CGI script")])
def test_timeout_set_in_fixups_cuts_a_cgi(apache, mpm, cgi, cut):
    a = apache(CONF, mpm=mpm, modules=[cgi],
               docs={"cgi/sleep.cgi": SLEEP_CGI})
    os.chmod(os.path.join(a.docroot, "cgi", "sleep.cgi"), 0o755)

    r = a.get("/cgi/sleep.cgi")
    assert r.status_code == 504
    log = a.wait_log("timeout 30000000 -> 2000000")
    assert cut in log
    # the next request, on the same connection when it was kept, has the
    # configured Timeout again
    assert a.get("/now").text == "30000000"


H2_CONF = """
Protocols h2c http/1.1
<Location /h2>
    mrubyHandlerMiddleCode ' \\
      s = Apache::Server.new; \\
      s.timeout = 2_000_000; \\
      Apache.rputs "#{s.timeout} #{Apache::Connection.new.remote_ip}"'
</Location>
"""


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_timeout_set_on_an_http2_stream(apache, mpm):
    """A request on an HTTP/2 stream (a secondary connection of
    mod_http2's) sets its Timeout too."""
    a = apache(H2_CONF, mpm=mpm, modules=["http2"])
    out = subprocess.run(
        ["curl", "-s", "--http2-prior-knowledge", "-m", "10",
         "-w", " %{http_version} %{response_code}",
         f"http://127.0.0.1:{a.port}/h2"],
        capture_output=True, text=True, timeout=20)
    assert out.stdout == "2000000 127.0.0.1 2 200", a.error_log()[-2000:]


H2_SLOW_CONF = """
Protocols h2c http/1.1
<Location /h2big>
    mrubyHandlerMiddleCode ' \\
      Apache::Server.new.timeout = 1; \\
      Apache.rputs "x" * (16 << 20)'
</Location>
"""


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_timeout_on_an_http2_stream_leaves_the_clients_socket(apache, mpm):
    """The stream's connection shares the socket of the client's: a Timeout
    of 1 us set by one stream's script is not that socket's, whose writes
    to a client reading slowly go on waiting for the configured 30 s."""
    a = apache(H2_SLOW_CONF, mpm=mpm, modules=["http2"])
    out = subprocess.run(
        ["curl", "-s", "--http2-prior-knowledge", "-m", "60",
         "--limit-rate", "4M", "-o", "/dev/null",
         "-w", "%{http_version} %{response_code} %{size_download}",
         f"http://127.0.0.1:{a.port}/h2big"],
        capture_output=True, text=True, timeout=90)
    assert (out.returncode, out.stdout) == (0, f"2 200 {16 << 20}"), \
        (out.returncode, out.stdout, a.error_log()[-2000:])
