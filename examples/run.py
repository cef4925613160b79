#!/usr/bin/env python3
"""make run: every example in one Apache (:8080) and one nginx (:8081).

Each example is a folder examples/<name>/ with its Ruby scripts and config
snippets:

    apache.conf       server-level Apache snippet (its URLs under /<name>/,
                      or its own <VirtualHost>)
    nginx.conf        put inside the nginx server block (locations under
                      /<name>/)
    nginx-http.conf   optional, put at nginx http level (init scripts,
                      shared dicts, extra server blocks)
    htdocs/           optional, copied to <docroot>/<name>/
    README.md         its first line describes the example

Placeholders in snippets: @DIR@ (the example folder, absolute) and
@DOCROOT@ (the document root both servers serve).  A `# try: /path [what]`
comment in a snippet names a URL to print; without one, /<name>/ is printed
with the README's first line.

An example whose snippet does not pass the server's config test is left out
with the reason printed; the others still run.  Ctrl-C or SIGTERM stops both
servers.  Nothing is installed here (make does that).

    python3 examples/run.py [--apache-port 8080] [--nginx-port 8081]
                            [--only name,name] [--no-apache] [--no-nginx]
"""

import argparse
import os
import shutil
import signal
import stat
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test"))

import harness  # noqa: E402


class Example:
    def __init__(self, name, path):
        self.name = name
        self.src = path      # in the repository
        self.dir = path      # what @DIR@ becomes (a copy if unreadable)
        self.snippets = {}
        for f in ("apache.conf", "nginx.conf", "nginx-http.conf"):
            p = os.path.join(path, f)
            if os.path.isfile(p):
                with open(p) as fh:
                    self.snippets[f] = fh.read()
        self.title = ""
        readme = os.path.join(path, "README.md")
        if os.path.isfile(readme):
            with open(readme) as fh:
                for line in fh:
                    if line.strip():
                        self.title = line.strip().lstrip("#").strip()
                        break

    def snippet(self, which, docroot):
        text = self.snippets.get(which, "")
        return (text.replace("@DIR@", self.dir)
                    .replace("@DOCROOT@", docroot))

    def tries(self, which):
        """[(path, what)] from `# try:` comments, or the default."""
        out = []
        for f in ((which,) if which == "apache.conf"
                  else ("nginx.conf", "nginx-http.conf")):
            for line in self.snippets.get(f, "").splitlines():
                line = line.strip()
                if line.startswith("# try:"):
                    parts = line[len("# try:"):].strip().split(None, 1)
                    if parts:
                        out.append((parts[0], parts[1] if len(parts) > 1
                                    else self.title))
        return out or [(f"/{self.name}/", self.title)]


def world_readable(path):
    """True if www-data can read path: o+x on every ancestor, o+r on it."""
    p = os.path.abspath(path)
    if not os.stat(p).st_mode & stat.S_IROTH:
        return False
    while p != "/":
        p = os.path.dirname(p)
        if not os.stat(p).st_mode & stat.S_IXOTH:
            return False
    return True


def find_examples(root, only):
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path) or name.startswith((".", "_")):
            continue
        if only and name not in only:
            continue
        ex = Example(name, path)
        if ex.snippets:
            out.append(ex)
    return out


def place_examples(examples, workdir):
    """Makes every example readable by the servers' www-data workers."""
    for ex in examples:
        if not world_readable(ex.src):
            ex.dir = os.path.join(workdir, "examples", ex.name)
            shutil.copytree(ex.src, ex.dir)
            for root, dirs, files in os.walk(os.path.dirname(ex.dir)):
                for n in dirs:
                    os.chmod(os.path.join(root, n), 0o755)
                for n in files:
                    os.chmod(os.path.join(root, n), 0o644)


def copy_htdocs(examples, docroot):
    for ex in examples:
        src = os.path.join(ex.src, "htdocs")
        if os.path.isdir(src):
            dst = os.path.join(docroot, ex.name)
            shutil.copytree(src, dst, dirs_exist_ok=True)
            for root, dirs, files in os.walk(dst):
                os.chmod(root, 0o755)
                for n in files:
                    os.chmod(os.path.join(root, n), 0o644)


# -- Apache ----------------------------------------------------------------

APACHE_MODULES = ("proxy", "proxy_http")
# Off only to try this script before the modules are built.
MRUBY = os.environ.get("MRUBY_RUN_WITHOUT_MODULES") != "1"


def apache_conf(examples, server):
    docroot = server.docroot
    parts = []
    if any("<VirtualHost" in ex.snippets.get("apache.conf", "")
           for ex in examples):
        # With any name-based vhost on the port, the first one answers for
        # unknown names: make that one the plain 127.0.0.1/localhost server,
        # which inherits every server-level snippet.
        parts.append(f"<VirtualHost {server.host}:{server.port}>\n"
                     f"    ServerName 127.0.0.1\n    ServerAlias localhost\n"
                     f"</VirtualHost>")
    for ex in examples:
        text = ex.snippet("apache.conf", docroot).replace(
            "{port}", str(server.port))
        # Scripts and files of an example may be served or aliased.
        parts.append(f"# --- example {ex.name} ---\n"
                     f"<Directory {ex.dir}>\n    Require all granted\n"
                     f"</Directory>\n{text}")
    return "\n".join(parts)


def make_apache(examples, port):
    a = harness.Apache("", mpm="event", modules=APACHE_MODULES, name="run",
                       mruby=MRUBY)
    a.port = port
    a.conf = apache_conf(examples, a)
    return a


# -- nginx -----------------------------------------------------------------

def nginx_conf(examples, server):
    docroot = server.docroot
    http = [ex.snippet("nginx-http.conf", docroot) for ex in examples]
    inner = "\n".join(f"# --- example {ex.name} ---\n"
                      f"{ex.snippet('nginx.conf', docroot)}"
                      for ex in examples)
    return "\n".join(h for h in http if h) + f"""
server {{
    listen {server.host}:{server.port};
    server_name localhost 127.0.0.1;
    root {docroot};
{inner}
}}
"""


def make_nginx(examples, port):
    n = harness.Nginx("", workers=2, name="run", mruby=MRUBY)
    n.port = port
    n.conf = nginx_conf(examples, n)
    return n


# -- selecting what passes the config test -----------------------------------

def usable(kind, make, examples, which):
    """The examples whose snippet passes the config test on its own."""
    mine = [ex for ex in examples
            if ex.snippets.get(which) or
            (which == "nginx.conf" and ex.snippets.get("nginx-http.conf"))]
    ok = []
    for ex in mine:
        probe = make([ex], harness.free_port())
        copy_htdocs([ex], probe.docroot)
        rc, out = probe.configtest()
        probe.remove()
        if rc == 0:
            ok.append(ex)
        else:
            print(f"  [{kind}] example {ex.name} left out: config test "
                  f"failed:\n      " + "\n      ".join(
                      out.strip().splitlines()[-5:]), flush=True)
    return ok


def prepare(kind, make, examples, which, port):
    """The server for the examples that pass its config test, not started."""
    exs = usable(kind, make, examples, which)
    if not exs:
        print(f"  [{kind}] no example to serve", flush=True)
    server = make(exs, port)
    copy_htdocs(exs, server.docroot)
    return server, exs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apache-port", type=int, default=8080)
    ap.add_argument("--nginx-port", type=int, default=8081)
    ap.add_argument("--only", default="",
                    help="comma-separated example names")
    ap.add_argument("--examples", default=HERE,
                    help="the folder holding the examples")
    ap.add_argument("--no-apache", action="store_true")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="start, GET every try URL once, stop (for CI)")
    args = ap.parse_args()

    only = {n for n in args.only.split(",") if n}
    examples = find_examples(os.path.abspath(args.examples), only)
    workdir = harness.make_www_dir("mruby-run-")
    place_examples(examples, workdir)
    print(f"{len(examples)} examples: {', '.join(e.name for e in examples)}")

    servers = []
    plan = []
    if not args.no_apache:
        plan.append(("apache", make_apache, "apache.conf", args.apache_port))
    if not args.no_nginx:
        plan.append(("nginx", make_nginx, "nginx.conf", args.nginx_port))

    # Every server is in `servers` before it starts, so that a signal while
    # it starts stops it too.  Stopping happens in one place (the finally
    # below); a signal raises SystemExit to get there, and once stopping
    # has begun, further signals (a second Ctrl-C, a SIGTERM after it) are
    # ignored instead of cutting the stop short and leaving a server up.
    stopping = False

    def stop_all():
        nonlocal stopping
        stopping = True
        while servers:
            s, _ = servers.pop()
            try:
                s.stop()
            except harness.HarnessError as e:
                print(e, file=sys.stderr)
            s.remove()
        shutil.rmtree(workdir, ignore_errors=True)

    def on_signal(signum, frame):
        nonlocal stopping
        if stopping:
            return
        stopping = True
        print("\nstopping...", flush=True)
        raise SystemExit(0)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    failed = 0
    try:
        for kind, make, which, port in plan:
            if harness.port_open(port):
                print(f"[{kind}] port {port} is in use: not started")
                failed += 1
                continue
            server, exs = prepare(kind, make, examples, which, port)
            servers.append((server, exs))
            try:
                server.start()
            except harness.HarnessError as e:
                servers.remove((server, exs))
                server.remove()
                print(f"[{kind}] did not start:\n{e}")
                failed += 1
                continue
            print(f"\n{kind} on http://127.0.0.1:{port}/  (config "
                  f"{server.conf_path}, logs {server.logs})")
            for ex in exs:
                for path, what in ex.tries(which):
                    print(f"  {server.url(path):45s} {what}")
        if not servers:
            return 1
        if args.check:
            for server, exs in servers:
                which = ("apache.conf" if isinstance(server, harness.Apache)
                         else "nginx.conf")
                for ex in exs:
                    for path, _ in ex.tries(which):
                        try:
                            code = server.get(path).status_code
                        except Exception as e:  # report, go on
                            code = f"error {e}"
                        print(f"  {code} {server.url(path)}")
            return failed
        print("\nCtrl-C stops both servers.", flush=True)
        while True:
            for server, _ in servers:
                if server.proc is None or server.proc.poll() is not None:
                    print(f"{server.name} exited; its error log:\n"
                          f"{server.error_log()[-3000:]}")
                    return 1
            time.sleep(0.5)
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
