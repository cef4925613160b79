"""The modules loaded into both servers leave static files alone, and
`make run` serves every example as its `# try:` line says."""

import glob
import os

import pytest

import harness


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_apache_static_with_the_module_loaded(apache, mpm):
    a = apache(mpm=mpm, docs={"hello.txt": "static hello\n"})
    r = a.get("/hello.txt")
    assert (r.status_code, r.text) == (200, "static hello\n")
    assert a.get("/missing.txt").status_code == 404
    assert "resuming normal operations" in a.error_log()


def test_nginx_static_with_the_module_loaded(nginx):
    n = nginx("location / { }", docs={"hello.txt": "static hello\n"})
    r = n.get("/hello.txt")
    assert (r.status_code, r.text) == (200, "static hello\n")
    assert n.get("/missing.txt").status_code == 404


def promised_codes():
    """{(server, path): status} from the examples' `# try: /path [what]`
    lines: the status `what` starts with, or 200."""
    import re
    promised = {}
    for conf in glob.glob(os.path.join(harness.REPO, "examples/*/*.conf")):
        server = "apache" if conf.endswith("apache.conf") else "nginx"
        with open(conf) as f:
            for line in f:
                m = re.match(r"# try: (\S+)\s*(\d{3}\b)?", line)
                if m:
                    promised[server, m.group(1)] = int(m.group(2) or 200)
    return promised


def test_make_run_serves_every_example():
    """examples/run.py (make run) starts both servers with every example,
    leaves none out, and each advertised URL answers as its `# try:` line
    says."""
    import re
    import subprocess
    import sys
    run = os.path.join(harness.REPO, "examples", "run.py")
    ports = {"apache": harness.free_port(), "nginx": harness.free_port()}
    p = subprocess.run(
        [sys.executable, run, "--check",
         "--apache-port", str(ports["apache"]),
         "--nginx-port", str(ports["nginx"])],
        capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "left out" not in out and "did not start" not in out, out
    by_port = {str(port): server for server, port in ports.items()}
    answered = {
        (by_port[port], path): int(code) if code.isdigit() else code
        for code, port, path in re.findall(
            r"^  (\d{3}|error.*?) http://127\.0\.0\.1:(\d+)(\S+)", out,
            re.M)}
    assert answered == promised_codes(), out
