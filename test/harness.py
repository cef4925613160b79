"""Real servers for the integration tests and the benchmarks.

Apache, nginx and redis-server are started as child processes on 127.0.0.1
and a free port, from a configuration generated in a fresh directory under
/tmp.  Nothing is mocked: a test speaks HTTP (or RESP) to the real thing.

    with Apache(conf='mrubyHandlerMiddle {dir}/hello.rb') as a:
        a.write('hello.rb', 'Apache.rputs "hi"')   # before start() usually
        assert a.get('/').text == 'hi'

Directories.  The tests run as root; Apache's children and nginx's workers
run as www-data, so every file a server reads lives under a directory made
with mode 0755 under /tmp (pytest's tmp_path is 0700 and would not do).
Each server object makes its own: .dir (config, logs, scripts) and
.docroot (= .dir/htdocs).

Placeholders in conf snippets, replaced with str.replace (Ruby code in a
snippet has braces, so no str.format): {dir}, {docroot}, {port}, {port2},
{port3}, and @REPO@ for the repository root.

Environment:
    MRUBY_BUILD   build directory with the modules (default "build", relative
                  to the repository root)
    MRUBY_ASAN=1  run the servers with gcc's libasan preloaded; after stop(),
                  any AddressSanitizer report fails loudly.
"""

import glob
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, os.environ.get("MRUBY_BUILD", "build"))
ASAN = os.environ.get("MRUBY_ASAN") == "1"

APACHE_BIN = "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"
NGINX_BIN = "/usr/sbin/nginx"
NGINX_MODULES = "/usr/lib/nginx/modules"
REDIS_BIN = "/usr/bin/redis-server"
REDIS_CLI_BIN = "/usr/bin/redis-cli"


def nginx_version():
    """The version of the nginx the tests run, as a string: "1.22.1"."""
    out = subprocess.run([NGINX_BIN, "-v"], capture_output=True,
                         text=True).stderr
    return re.search(r"nginx/(\d+\.\d+\.\d+)", out).group(1)


def nginx_at_least(version):
    """Whether the nginx the tests run is version ("1.25.5") or newer."""
    def key(v):
        return tuple(int(x) for x in v.split("."))
    return key(nginx_version()) >= key(version)


def mruby_release_no():
    """The mruby the modules are built with (Debian's headers): 30100."""
    with open("/usr/include/mruby/version.h") as f:
        text = f.read()
    major, minor, teeny = (
        int(re.search(rf"#define MRUBY_RELEASE_{part} (\d+)", text).group(1))
        for part in ("MAJOR", "MINOR", "TEENY"))
    return major * 10000 + minor * 100 + teeny


_INSPECT_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|(?<=[{ ]):(\w+[?!]?)=>|=>')


def inspected(text):
    """Expected output written with mruby 3.x's Hash#inspect ({"a"=>1,
    :b=>2}) as this machine's mruby writes it: 4.0 as Ruby 3.4 does
    ({"a" => 1, b: 2}).  Strings inside are left as they are."""
    if mruby_release_no() < 40000:
        return text

    def one(m):
        if m.group(0).startswith('"'):
            return m.group(0)
        if m.group(1) is not None:
            return m.group(1) + ": "
        return " => "
    return _INSPECT_TOKEN.sub(one, text)

MOD_MRUBY = os.path.join(BUILD, "mod_mruby.so")
NGX_HTTP_MRUBY = os.path.join(BUILD, "ngx_http_mruby_module.so")
NGX_STREAM_MRUBY = os.path.join(BUILD, "ngx_stream_mruby_module.so")

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
HTTP_TIMEOUT = 10.0

# The modules every generated httpd.conf loads (besides the MPM and mruby).
APACHE_BASE_MODULES = (
    "authz_core", "authz_host", "authn_core", "authn_file", "authz_user",
    "auth_basic", "mime", "dir", "alias", "log_config", "env", "setenvif",
    "headers", "rewrite", "status",
)

# Extra modules by short name; a tuple when one needs others loaded first.
APACHE_EXTRA_MODULES = {
    "proxy": ("proxy",),
    "proxy_http": ("proxy", "proxy_http"),
    "lua": ("lua",),
    "perl": ("perl",),
}

MPM_CONF = {
    # 2 cores: few processes, but enough threads for 64+ concurrent requests.
    "event": """\
StartServers 2
ServerLimit 2
ThreadsPerChild 64
ThreadLimit 64
MinSpareThreads 64
MaxSpareThreads 128
MaxRequestWorkers 128
MaxConnectionsPerChild 0
""",
    "worker": """\
StartServers 2
ServerLimit 2
ThreadsPerChild 64
ThreadLimit 64
MinSpareThreads 64
MaxSpareThreads 128
MaxRequestWorkers 128
MaxConnectionsPerChild 0
""",
    "prefork": """\
StartServers 4
MinSpareServers 4
MaxSpareServers 8
ServerLimit 32
MaxRequestWorkers 32
MaxConnectionsPerChild 0
""",
}


# One child process, so that requests sent one after another run in the same
# interpreter (a child lends the interpreter given back last to the next run).
ONE_CHILD = {
    "event": "StartServers 1\nServerLimit 1\nThreadsPerChild 4\n"
             "ThreadLimit 4\nMinSpareThreads 1\nMaxSpareThreads 4\n"
             "MaxRequestWorkers 4\nMaxConnectionsPerChild 0\n",
    "prefork": "StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\n"
               "ServerLimit 1\nMaxRequestWorkers 1\n"
               "MaxConnectionsPerChild 0\n",
}


def one_interpreter(kind, apache, nginx, routes, files, nginx_main="",
                    apache_main="", **kw):
    """A started server, kind "nginx", "apache-event" or "apache-prefork",
    whose requests one after another run in one interpreter (one nginx
    worker; one Apache child, which lends the interpreter given back last
    to the next run).  routes: {"/path": "script.rb"}, content handlers of
    files; nginx_main / apache_main: lines before them (startup scripts,
    dictionaries); kw: more of the server's options (loglevel=...)."""
    if kind == "nginx":
        locs = "".join(f"    location = {path} {{ mruby_content_handler "
                       f"{{dir}}/{script}; }}\n"
                       for path, script in routes.items())
        return nginx(nginx_main + "server {\n    listen 127.0.0.1:{port};\n"
                     + locs + "}\n", files=files, **kw)
    mpm = kind.split("-")[1]
    locs = "".join(f"<Location {path}>\n    mrubyHandlerMiddle "
                   f"{{dir}}/{script}\n</Location>\n"
                   for path, script in routes.items())
    return apache(apache_main + locs, mpm=mpm, mpm_conf=ONE_CHILD[mpm],
                  files=files, **kw)


class HarnessError(Exception):
    """A server could not be set up, started or stopped."""


# Sockets that hold the ports free_port() handed out, for the life of this
# process.  Bound with SO_REUSEADDR and never listening, a socket keeps the
# kernel from giving its port to anyone else (another test's bind to port 0,
# an outgoing connection), while a server that binds the port with
# SO_REUSEADDR, as Apache, nginx and redis-server do, can still listen on it.
_reserved_ports = []


def _raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 8192):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))


_raise_fd_limit()


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on, reserved for servers
    of this process: no other process is given it while this one runs."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _reserved_ports.append(s)
    return s.getsockname()[1]


class UnnoticedWriter:
    """Changes a file's bytes in place through a shared mapping opened
    earlier: readers see the new bytes at once, but inotify reports nothing
    (IN_OPEN came when the mapping was made, IN_CLOSE_WRITE comes only when
    it is closed).  A script served under `never` (read on every run) shows
    the change at once and one under a cache policy does not, which tells
    the policies apart.  Open it before the server first runs the script."""

    def __init__(self, path):
        import mmap
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), 0)

    def replace(self, old, new):
        assert len(old) == len(new)
        i = self._map.find(old)
        assert i >= 0, f"{old!r} not in {self._file.name}"
        self._map[i:i + len(old)] = new

    def close(self):
        self._map.close()
        self._file.close()


def make_www_dir(prefix):
    """A fresh directory under /tmp, mode 0755, readable by www-data."""
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)
    return d


def read_until_closed(sock):
    """All the server sends until it closes the connection; a reset
    counts as closing (a stream server that denies resets)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def setup_example(server, name):
    """Copies examples/<name> into the server's directory (readable by its
    workers), its htdocs into <docroot>/<name>/, and returns the server's
    snippet with the placeholders filled in."""
    src = os.path.join(REPO, "examples", name)
    dst = os.path.join(server.dir, "examples", name)
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(os.path.join(server.dir, "examples")):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    htdocs = os.path.join(dst, "htdocs")
    if os.path.isdir(htdocs):
        shutil.copytree(htdocs, os.path.join(server.docroot, name))
        for root, dirs, files in os.walk(server.docroot):
            os.chmod(root, 0o755)
    which = "apache.conf" if server.name == "apache" else "nginx.conf"
    with open(os.path.join(dst, which)) as f:
        snippet = f.read()
    return snippet.replace("@DIR@", dst).replace("@DOCROOT@", server.docroot)


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def apache_builtin_modules():
    """Modules compiled into Debian's apache2 (mod_log_config, ...)."""
    out = subprocess.run([APACHE_BIN, "-l"], capture_output=True,
                         text=True).stdout
    return {line.strip()[4:-2] for line in out.splitlines()
            if line.strip().startswith("mod_")}


def require_file(path, what):
    if not os.path.exists(path):
        hint = ("run `make` first (MRUBY_BUILD="
                f"{os.environ.get('MRUBY_BUILD', 'build')})"
                if path.startswith(BUILD) else "is its package installed?")
        raise HarnessError(f"{what} not found at {path}: {hint}")


def asan_env():
    """Environment additions that run a server under AddressSanitizer."""
    lib = subprocess.run(["gcc", "-print-file-name=libasan.so"],
                         capture_output=True, text=True).stdout.strip()
    if not lib or not os.path.exists(lib):
        raise HarnessError("MRUBY_ASAN=1 but gcc has no libasan.so")
    return {"LD_PRELOAD": os.path.realpath(lib)}


def children_of(pid):
    """PIDs whose parent is pid (from /proc)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                data = f.read()
        except OSError:
            continue
        # comm may contain spaces and parens: split after the last ')'.
        fields = data[data.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return sorted(out)


# Ruby that gives the pid of the process that runs it (a String).
PID_RB = 'File.open("/proc/self/stat") { |f| f.read }.split(" ")[0]'


def rss_kb(pid):
    """Resident set size of pid in kB (VmRSS), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class Server:
    """What Apache and nginx share: a directory, a child process, HTTP."""

    name = "server"

    def __init__(self, conf="", name=None, host="127.0.0.1"):
        self.dir = make_www_dir(f"mruby-{name or self.name}-")
        self.docroot = os.path.join(self.dir, "htdocs")
        self.logs = os.path.join(self.dir, "logs")
        for d in (self.docroot, self.logs):
            os.makedirs(d, mode=0o755, exist_ok=True)
            os.chmod(d, 0o755)
        self.host = host
        self.port = free_port()
        self.port2 = free_port()
        self.port3 = free_port()
        self.conf = conf
        self.proc = None
        self.stdout_path = os.path.join(self.dir, "stdout.log")
        self.asan_dir = os.path.join(self.dir, "asan")
        self.session = requests.Session()
        self.session.trust_env = False  # never through a proxy from the env
        self._stdout = None

    # -- files ------------------------------------------------------------

    def subst(self, text):
        """Replaces the placeholders in a conf snippet or script."""
        for key, val in (("{dir}", self.dir), ("{docroot}", self.docroot),
                         ("{port}", str(self.port)),
                         ("{port2}", str(self.port2)),
                         ("{port3}", str(self.port3)), ("@REPO@", REPO)):
            text = text.replace(key, val)
        return text

    def write(self, relpath, content, mode=0o644):
        """Writes a file under .dir (placeholders are NOT replaced), making
        its parent directories 0755.  Returns the absolute path."""
        path = os.path.join(self.dir, relpath)
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755, exist_ok=True)
            # makedirs applies the umask: make the whole chain readable.
            p = parent
            while p != self.dir and p.startswith(self.dir):
                os.chmod(p, 0o755)
                p = os.path.dirname(p)
        data = content.encode() if isinstance(content, str) else content
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        return path

    def write_doc(self, relpath, content, mode=0o644):
        """Writes a file under .docroot."""
        return self.write(os.path.join("htdocs", relpath), content, mode)

    def error_log(self):
        return _read(os.path.join(self.logs, "error.log"))

    def wait_log(self, text, timeout=5.0):
        """Waits until text appears in the error log (servers write it
        asynchronously to the response); returns the log, or raises."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.error_log()
            if text in log:
                return log
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in {self.name} error "
                                     f"log after {timeout} s:\n{log[-3000:]}")
            time.sleep(0.05)

    def access_log(self):
        return _read(os.path.join(self.logs, "access.log"))

    def stdout(self):
        return _read(self.stdout_path)

    # -- HTTP -------------------------------------------------------------

    def url(self, path="/", port=None):
        if not path.startswith("/"):
            path = "/" + path
        return f"http://{self.host}:{port or self.port}{path}"

    def request(self, method, path="/", port=None, **kw):
        kw.setdefault("timeout", HTTP_TIMEOUT)
        kw.setdefault("allow_redirects", False)
        return self.session.request(method, self.url(path, port), **kw)

    def raw(self, request, port=None, timeout=10):
        """Sends raw bytes (what requests cannot send, or would mend) and
        returns all the server answers until it closes the connection."""
        with socket.create_connection((self.host, port or self.port),
                                      timeout=timeout) as s:
            s.sendall(request)
            return read_until_closed(s)

    def get(self, path="/", **kw):
        return self.request("GET", path, **kw)

    def get_spread(self, path="/", count=16, concurrency=4, **kw):
        """count GETs of path, concurrency at a time, each on a connection
        of its own (Connection: close), so that they spread over the worker
        processes (the session's kept-alive connection reaches one); returns
        the responses in the order sent."""
        import concurrent.futures
        kw.setdefault("timeout", HTTP_TIMEOUT)
        kw.setdefault("allow_redirects", False)
        headers = dict(kw.pop("headers", None) or {}, Connection="close")

        def one(_):
            with requests.Session() as s:
                s.trust_env = False
                return s.get(self.url(path), headers=headers, **kw)
        with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
            return list(ex.map(one, range(count)))

    # Whether an edit of a `stat` script may be missed for a moment by a
    # request sent right after it: an Apache child's watcher thread reads
    # the event when it is scheduled (docs/apache.md); nginx reads it before
    # any request sent after the edit (docs/nginx.md).
    edit_window = False

    def get_edited(self, path, expect, timeout=10.0, **kw):
        """The answer of path just after an edit: where the server has an
        edit window, the requests go on until expect (the body, or a
        predicate of the response) holds or timeout ends, and each answer
        before it must be what expect rejects for being the old version
        (the caller's next assertion says so); elsewhere the next request
        is the answer.  Returns the last response."""
        holds = expect if callable(expect) else lambda r: r.text == expect
        deadline = time.monotonic() + timeout
        while True:
            r = self.get(path, **kw)
            if holds(r) or not self.edit_window \
                    or time.monotonic() > deadline:
                return r
            time.sleep(0.005)

    def get_spread_edited(self, path, expect, count=16, timeout=10.0,
                          **kw):
        """get_spread once every answer holds expect (see get_edited):
        each worker process sees an edit when it has read its event."""
        holds = expect if callable(expect) else lambda r: r.text == expect
        deadline = time.monotonic() + timeout
        while True:
            rs = self.get_spread(path, count=count, **kw)
            if all(holds(r) for r in rs) or not self.edit_window \
                    or time.monotonic() > deadline:
                return rs
            time.sleep(0.005)

    def post(self, path="/", **kw):
        return self.request("POST", path, **kw)

    def head(self, path="/", **kw):
        return self.request("HEAD", path, **kw)

    # -- process ----------------------------------------------------------

    def env(self):
        env = dict(os.environ)
        for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(var, None)
        if ASAN:
            os.makedirs(self.asan_dir, mode=0o777, exist_ok=True)
            os.chmod(self.asan_dir, 0o777)  # the workers are www-data
            env.update(asan_env())
            env["ASAN_OPTIONS"] = (
                "detect_leaks=0:abort_on_error=0:"
                f"log_path={self.asan_dir}/asan")
        return env

    def command(self):
        raise NotImplementedError

    def generate(self):
        raise NotImplementedError

    def _spawn(self):
        self.generate()
        self._stdout = open(self.stdout_path, "ab")
        self.proc = subprocess.Popen(
            self.command(), cwd=self.dir, env=self.env(),
            stdin=subprocess.DEVNULL, stdout=self._stdout,
            stderr=subprocess.STDOUT, start_new_session=True)

    def start(self):
        if self.proc is not None:
            raise HarnessError(f"{self.name} already started")
        self._spawn()
        self._wait_serving(lambda: True)
        return self

    def _ready(self):
        return port_open(self.port, self.host)

    def _wait_serving(self, extra_ready):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail_start(f"exited with status {self.proc.returncode}")
            if self._ready() and extra_ready():
                return
            time.sleep(0.05)
        self._fail_start(f"not serving on port {self.port} "
                         f"after {START_TIMEOUT:.0f} s")

    def _fail_start(self, why):
        msg = (f"{self.name} {why}\n--- config {self.conf_path} ---\n"
               f"{_read(self.conf_path)}\n--- output ---\n{self.stdout()}\n"
               f"--- error log ---\n{self.error_log()}")
        self.stop(check_asan=False)
        raise HarnessError(msg)

    def stop(self, check_asan=True):
        """Stops the server and everything it started; idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left in the process group (workers that did not
            # exit, a master that hung): kill it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None
        self.session.close()
        if check_asan:
            self.check_asan()

    def check_asan(self):
        """Raises if AddressSanitizer wrote any report."""
        reports = sorted(glob.glob(os.path.join(self.asan_dir, "asan*")))
        if reports:
            text = "\n".join(f"=== {r}\n{_read(r)}" for r in reports)
            raise HarnessError(f"AddressSanitizer reports from {self.name}:"
                               f"\n{text}")

    def master_pid(self):
        return self.proc.pid if self.proc else None

    def worker_pids(self):
        """PIDs of the worker processes (children of the master)."""
        pid = self.master_pid()
        return children_of(pid) if pid else []

    def remove(self):
        """Deletes the server's directory (after stop())."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop(check_asan=exc[0] is None)
        return False


class Apache(Server):
    """Apache httpd (apache2 -f <conf> -DFOREGROUND) with mod_mruby loaded.

    conf is a snippet inserted at server level at the end of httpd.conf.
    mpm: "event", "worker" or "prefork".  modules: extra module short names
    ("proxy", "proxy_http", "lua", "perl") or (name, path) pairs.
    mruby=False leaves mod_mruby out (for references and baselines).
    """

    name = "apache"
    edit_window = True

    def __init__(self, conf="", mpm="event", modules=(), name=None,
                 mruby=True, mpm_conf=None, keepalive=True, loglevel="info",
                 access_log=True):
        if mruby:
            require_file(MOD_MRUBY, "mod_mruby")
        super().__init__(conf, name=name)
        if mpm not in MPM_CONF:
            raise HarnessError(f"unknown MPM {mpm!r}")
        self.mpm = mpm
        self.modules = tuple(modules)
        self.mruby = mruby
        self.mpm_conf = mpm_conf if mpm_conf is not None else MPM_CONF[mpm]
        self.keepalive = keepalive
        self.loglevel = loglevel
        self.access_log_on = access_log
        self.conf_path = os.path.join(self.dir, "httpd.conf")
        self.pid_path = os.path.join(self.logs, "httpd.pid")
        self.run_dir = os.path.join(self.dir, "run")
        os.makedirs(self.run_dir, mode=0o755, exist_ok=True)

    def _load_lines(self):
        seen, lines = set(apache_builtin_modules()), []

        def load(mod, path=None):
            if mod in seen:
                return
            seen.add(mod)
            path = path or os.path.join(APACHE_MODULES, f"mod_{mod}.so")
            require_file(path, f"Apache module {mod}")
            lines.append(f"LoadModule {mod}_module {path}")

        load(f"mpm_{self.mpm}")
        for mod in APACHE_BASE_MODULES:
            load(mod)
        for mod in self.modules:
            if isinstance(mod, tuple):
                load(*mod)
            else:
                for dep in APACHE_EXTRA_MODULES.get(mod, (mod,)):
                    load(dep)
        if self.mruby:
            lines.append(f"LoadModule mruby_module {MOD_MRUBY}")
        return "\n".join(lines)

    def generate(self):
        d = self.dir
        text = f"""\
# generated by test/harness.py
ServerRoot {d}
DefaultRuntimeDir {self.run_dir}
PidFile {self.pid_path}
Mutex file:{self.run_dir} default
{self._load_lines()}

Listen {self.host}:{self.port}
ServerName 127.0.0.1
ServerAdmin root@localhost
User www-data
Group www-data

<IfModule mpm_{self.mpm}_module>
{self.mpm_conf}</IfModule>

Timeout 30
KeepAlive {"On" if self.keepalive else "Off"}
MaxKeepAliveRequests 0
KeepAliveTimeout 5

ErrorLog {self.logs}/error.log
LogLevel {self.loglevel}
LogFormat "%h %l %u %t \\"%r\\" %>s %b" common
{"" if self.access_log_on else "#"}CustomLog {self.logs}/access.log common

TypesConfig /etc/mime.types
DirectoryIndex index.html
AddDefaultCharset Off

<Directory />
    AllowOverride None
    Require all denied
</Directory>
DocumentRoot {self.docroot}
<Directory {self.docroot}>
    Options FollowSymLinks
    AllowOverride None
    Require all granted
</Directory>
<Directory {d}>
    Require all granted
</Directory>

# --- test snippet ---
{self.subst(self.conf)}
"""
        with open(self.conf_path, "w") as f:
            f.write(text)
        os.chmod(self.conf_path, 0o644)

    def command(self):
        return [APACHE_BIN, "-f", self.conf_path, "-DFOREGROUND"]

    def _ready(self):
        # The parent listens before its MPM installs the signal handlers;
        # a graceful (SIGUSR1) in between would end it.  The MPM says
        # "resuming normal operations" (at notice, which Apache logs
        # whatever the LogLevel) once they are in place.
        return (super()._ready()
                and "resuming normal operations" in self.error_log())

    def env(self):
        env = super().env()
        # What /etc/apache2/envvars would give; apache2 reads these itself.
        env.setdefault("APACHE_RUN_USER", "www-data")
        env.setdefault("APACHE_RUN_GROUP", "www-data")
        env["APACHE_RUN_DIR"] = self.run_dir
        env["APACHE_PID_FILE"] = self.pid_path
        env["APACHE_LOCK_DIR"] = self.run_dir
        env["APACHE_LOG_DIR"] = self.logs
        env.setdefault("LANG", "C")
        return env

    def configtest(self):
        """apache2 -t: (returncode, output)."""
        self.generate()
        p = subprocess.run([APACHE_BIN, "-t", "-f", self.conf_path],
                           cwd=self.dir, env=self.env(), capture_output=True,
                           text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def graceful(self):
        """Regenerates the config from .conf, restarts gracefully (SIGUSR1)
        and returns when the new generation serves (new children)."""
        self.generate()
        old = set(self.worker_pids())
        os.kill(self.proc.pid, signal.SIGUSR1)
        self._wait_new_workers(old)

    def restart(self):
        """Hard restart (SIGHUP)."""
        self.generate()
        old = set(self.worker_pids())
        os.kill(self.proc.pid, signal.SIGHUP)
        self._wait_new_workers(old)

    def _wait_new_workers(self, old):
        def renewed():
            pids = set(self.worker_pids())
            return bool(pids) and not (pids & old)
        self._wait_serving(renewed)

    def worker_pids(self):
        # Under Apache the master's children are the workers (no helpers
        # besides these when mod_cgid is not loaded).
        return super().worker_pids()


class Nginx(Server):
    """nginx (nginx -p <dir> -c <conf>, daemon off) with ngx_mruby loaded.

    conf is the content of the http block.  If it has no "server {" it is
    wrapped into a default server listening on {port} with root {docroot}.
    main_conf goes at main level (before events), stream_conf into a stream
    block (loading the stream modules).  worker_connections: the default
    1,024 is too few for a bench's thousand clients.  debug_log: nginx's
    debug lines too, in logs/debug.log, while logs/error.log keeps
    loglevel (nginx keeps the logs of a level sorted by verbosity and asks
    the first whether a debug line is wanted).
    """

    name = "nginx"

    def __init__(self, conf="", main_conf="", stream_conf="", workers=1,
                 name=None, mruby=True, modules=(), loglevel="info",
                 access_log=True, worker_connections=1024, debug_log=False):
        if mruby:
            require_file(NGX_HTTP_MRUBY, "ngx_http_mruby_module")
        super().__init__(conf, name=name)
        self.main_conf = main_conf
        self.stream_conf = stream_conf
        self.workers = workers
        self.mruby = mruby
        self.modules = tuple(modules)  # extra .so paths (load_module)
        self.loglevel = loglevel
        self.debug_log = debug_log
        self.access_log_on = access_log
        self.worker_connections = worker_connections
        self.conf_path = os.path.join(self.dir, "nginx.conf")
        self.pid_path = os.path.join(self.logs, "nginx.pid")
        self.temp = os.path.join(self.dir, "temp")
        os.makedirs(self.temp, mode=0o755, exist_ok=True)

    def stream_module(self):
        """Debian's ngx_stream_module.so, or the one built with ours."""
        for p in (os.path.join(NGINX_MODULES, "ngx_stream_module.so"),
                  os.path.join(BUILD, "nginx", "objs", "ngx_stream_module.so")):
            if os.path.exists(p):
                return p
        raise HarnessError("no ngx_stream_module.so (Debian libnginx-mod-"
                           "stream, or build/nginx/objs after `make`)")

    def _load_lines(self):
        lines = [f"load_module {p};" for p in self.modules]
        if self.stream_conf:
            lines.append(f"load_module {self.stream_module()};")
        if self.mruby:
            lines.append(f"load_module {NGX_HTTP_MRUBY};")
            if self.stream_conf and os.path.exists(NGX_STREAM_MRUBY):
                lines.append(f"load_module {NGX_STREAM_MRUBY};")
        return "\n".join(lines)

    def generate(self):
        logs, temp = self.logs, self.temp
        http = self.subst(self.conf)
        if "server {" not in http and "server{" not in http:
            http = f"""\
server {{
    listen {self.host}:{self.port};
    server_name localhost;
    root {self.docroot};
{http}
}}"""
        stream = ""
        if self.stream_conf:
            stream = f"stream {{\n{self.subst(self.stream_conf)}\n}}\n"
        text = f"""\
# generated by test/harness.py
{self._load_lines()}
daemon off;
master_process on;
worker_processes {self.workers};
user www-data;
pid {self.pid_path};
error_log {logs}/error.log {self.loglevel};
{f"error_log {logs}/debug.log debug;" if self.debug_log else ""}
{self.subst(self.main_conf)}

events {{
    worker_connections {self.worker_connections};
}}

http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {f"{logs}/access.log" if self.access_log_on else "off"};
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    keepalive_requests 1000000;

{http}
}}
{stream}"""
        with open(self.conf_path, "w") as f:
            f.write(text)
        os.chmod(self.conf_path, 0o644)
        self.generated = text

    def command(self):
        return [NGINX_BIN, "-p", self.dir + "/", "-c", self.conf_path,
                "-e", os.path.join(self.logs, "error.log")]

    def configtest(self):
        """nginx -t: (returncode, output)."""
        self.generate()
        p = subprocess.run([NGINX_BIN, "-t", "-p", self.dir + "/", "-c",
                            self.conf_path, "-e",
                            os.path.join(self.logs, "error.log")],
                           cwd=self.dir, env=self.env(), capture_output=True,
                           text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def _ready(self):
        # The master listens before the workers exist; wait for both.
        return super()._ready() and bool(self.worker_pids())

    def reload(self):
        """Regenerates the config from .conf, sends SIGHUP, returns when
        only new workers are left and they serve."""
        self.generate()
        old = set(self.worker_pids())
        os.kill(self.proc.pid, signal.SIGHUP)

        def renewed():
            pids = set(self.worker_pids())
            return len(pids) >= self.workers and not (pids & old)
        self._wait_serving(renewed)


OPENSSL_BIN = "/usr/bin/openssl"


def tls_files(dir, name="test"):
    """A test CA and two certificates it signs, made with openssl in dir
    (files readable by the servers' workers): {"ca", "server_cert",
    "server_key", "client_cert", "client_key"}.  The server's names
    127.0.0.1 (an IP SAN) and localhost."""
    def openssl(*args):
        subprocess.run([OPENSSL_BIN, *args], check=True, cwd=dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    f = {k: os.path.join(dir, f"{name}-{k}.pem")
         for k in ("ca", "ca_key", "server_cert", "server_key",
                   "client_cert", "client_key")}
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", f"/CN={name} CA",
            # OpenSSL's strict checks, on in Python 3.13's default context
            # (trixie), refuse a CA without key usage
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", f["ca_key"], "-out", f["ca"])
    for who, san in (("server", "IP:127.0.0.1,DNS:localhost"),
                     ("client", None)):
        csr = os.path.join(dir, f"{name}-{who}.csr")
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                f"/CN={name} {who}", "-keyout", f[f"{who}_key"], "-out", csr)
        ext = os.path.join(dir, f"{name}-{who}.ext")
        with open(ext, "w") as out:
            out.write(f"subjectAltName={san}\n" if san else
                      "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", csr, "-CA", f["ca"], "-CAkey",
                f["ca_key"], "-CAcreateserial", "-days", "2", "-extfile",
                ext, "-out", f[f"{who}_cert"])
    for path in f.values():
        os.chmod(path, 0o644)
    return f


def stop_process(proc):
    """SIGTERM, then SIGKILL after STOP_TIMEOUT, to a child still
    running."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


class Redis:
    """redis-server on 127.0.0.1:<free port>, no persistence; args: more
    of redis-server's options; dir: its directory (made if not given).
    auth: (user or None, password) that .command sends first (the
    server's ACL is in args).  unixsocket: a path to listen on instead of
    a TCP port.  tls: (ca, cert, key) files: TLS only, on .port, clients
    with a certificate of that CA (harness.tls_files makes them)."""

    def __init__(self, name=None, args=(), dir=None, auth=None,
                 unixsocket=None, tls=None):
        self.dir = dir or make_www_dir(f"mruby-{name or 'redis'}-")
        self.host = "127.0.0.1"
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(self.dir, "redis.log")
        self.args = list(args)
        self.auth = auth
        self.unixsocket = unixsocket
        self.tls = tls

    def _listen_args(self):
        if self.unixsocket:
            return ["--port", "0", "--unixsocket", self.unixsocket,
                    "--unixsocketperm", "777"]
        if self.tls:
            ca, cert, key = self.tls
            return ["--port", "0", "--tls-port", str(self.port),
                    "--tls-ca-cert-file", ca, "--tls-cert-file", cert,
                    "--tls-key-file", key, "--tls-auth-clients", "yes"]
        return ["--port", str(self.port)]

    def _connect(self):
        if self.unixsocket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2)
            try:
                s.connect(self.unixsocket)
            except OSError:
                s.close()
                raise
            return s
        s = socket.create_connection((self.host, self.port), timeout=2)
        if self.tls:
            import ssl
            ca, cert, key = self.tls
            ctx = ssl.create_default_context(cafile=ca)
            ctx.load_cert_chain(cert, key)
            s = ctx.wrap_socket(s, server_hostname=self.host)
        return s

    def start(self):
        args = [REDIS_BIN, "--bind", self.host] + self._listen_args() + [
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.dir, "--logfile", self.log_path,
                "--protected-mode", "no"] + self.args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if self.command("PING") == "+PONG":
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        log = _read(self.log_path)
        self.stop()
        raise HarnessError(f"redis-server did not start\n{log}")

    def command(self, *args):
        """Sends one command, returns the first reply line (no parsing
        beyond that: enough for PING/SET/GET of short values in tests)."""
        payload = b""
        commands = [args]
        if self.auth:
            commands.insert(0, ("AUTH", *(a for a in self.auth if a)))
        for command in commands:
            payload += b"*%d\r\n" % len(command)
            for a in command:
                a = a if isinstance(a, bytes) else str(a).encode()
                payload += b"$%d\r\n%s\r\n" % (len(a), a)
        with self._connect() as s:
            s.sendall(payload)
            buf = b""
            if self.auth:
                # AUTH's reply first: +OK, or the error instead of ours
                while b"\r\n" not in buf:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                line, _, buf = buf.partition(b"\r\n")
                if not line.startswith(b"+"):
                    return line.decode(errors="replace")
            while not buf.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            line = buf.split(b"\r\n")[0].decode(errors="replace")
            if line.startswith("$") and line != "$-1":
                # bulk string: read its value
                n = int(line[1:])
                rest = buf[len(line) + 2:]
                while len(rest) < n + 2:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    rest += chunk
                return rest[:n].decode(errors="replace")
            return line

    def url(self):
        return f"redis://{self.host}:{self.port}"

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc)

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class RedisCluster:
    """A Redis Cluster of six redis-server on 127.0.0.1 (three masters,
    a replica each), made by `redis-cli --cluster create`, each node in a
    directory of its own under .dir.  .nodes are harness.Redis objects.
    node_timeout: cluster-node-timeout (ms), after which a master that
    does not answer is failed over to its replica."""

    SIZE = 6

    def __init__(self, name="cluster", node_timeout=5000):
        self.dir = make_www_dir(f"mruby-{name}-")
        self.nodes = []
        for i in range(self.SIZE):
            d = os.path.join(self.dir, f"node{i}")
            os.mkdir(d)
            node = Redis(args=[], dir=d)
            node.args = ["--cluster-enabled", "yes", "--cluster-config-file",
                         f"nodes-{node.port}.conf",
                         "--cluster-node-timeout", str(node_timeout),
                         "--repl-diskless-sync-delay", "0"]
            self.nodes.append(node)

    def seeds(self):
        return [f"{n.host}:{n.port}" for n in self.nodes]

    def start(self):
        try:
            for n in self.nodes:
                n.start()
            made = subprocess.run(
                [REDIS_CLI_BIN, "--cluster", "create", *self.seeds(),
                 "--cluster-replicas", "1", "--cluster-yes"],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=60)
            if made.returncode != 0:
                raise HarnessError(f"redis-cli --cluster create failed\n"
                                   f"{made.stdout}{made.stderr}")
            deadline = time.monotonic() + 60
            while not self._ready():
                if time.monotonic() > deadline:
                    raise HarnessError("the Redis Cluster did not reach "
                                       "cluster_state:ok on every node")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self):
        """Every node sees the cluster ok, every replica has its master's
        data (a replica that never synced cannot be failed over to), and
        the first node knows every replica as one (replica_of asks it)."""
        for n in self.nodes:
            if "cluster_state:ok" not in n.command("CLUSTER", "INFO"):
                return False
            info = n.command("INFO", "replication")
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        replicas = [f for f in (line.split() for line in self.nodes[0]
                                .command("CLUSTER", "NODES").splitlines())
                    if len(f) > 3 and "slave" in f[2].split(",")]
        return (len(self.masters()) == self.SIZE // 2
                and len(replicas) == self.SIZE // 2)

    def cli(self, node, *args):
        """A command on node through redis-cli (the whole reply, as
        text)."""
        out = subprocess.run([REDIS_CLI_BIN, "-h", node.host, "-p",
                              str(node.port), *map(str, args)],
                             stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=STOP_TIMEOUT)
        return out.stdout.strip()

    def masters(self):
        """{node id: harness.Redis} of the masters that serve slots, as
        the first node sees them."""
        by_port = {n.port: n for n in self.nodes}
        found = {}
        for line in self.nodes[0].command("CLUSTER", "NODES").splitlines():
            f = line.split()
            if len(f) > 8 and "master" in f[2].split(","):
                port = int(f[1].split("@")[0].rsplit(":", 1)[1])
                found[f[0]] = by_port[port]
        return found

    def node_of_slot(self, slot):
        """(node id, harness.Redis) of the master serving slot."""
        by_port = {n.port: n for n in self.nodes}
        for line in self.nodes[0].command("CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" not in f[2].split(","):
                continue
            for r in f[8:]:
                lo, _, hi = r.partition("-")
                if r[0] != "[" and int(lo) <= slot <= int(hi or lo):
                    port = int(f[1].split("@")[0].rsplit(":", 1)[1])
                    return f[0], by_port[port]
        raise HarnessError(f"no master serves slot {slot}")

    def key_slot(self, key):
        return int(self.nodes[0].command("CLUSTER", "KEYSLOT", key)[1:])

    def replica_of(self, master_id):
        """The harness.Redis of master_id's replica, as the first node
        sees it."""
        by_port = {n.port: n for n in self.nodes}
        for line in self.nodes[0].command("CLUSTER", "NODES").splitlines():
            f = line.split()
            if f[3] == master_id:
                return by_port[int(f[1].split("@")[0].rsplit(":", 1)[1])]
        raise HarnessError(f"{master_id} has no replica")

    def role(self, node):
        """"master" or "slave": ROLE of node."""
        return self.cli(node, "ROLE").splitlines()[0]

    def stop(self):
        for n in self.nodes:
            n.stop()

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


REDIS_SENTINEL_BIN = "/usr/bin/redis-sentinel"


class RedisSentinel:
    """A master with two replicas and three redis-sentinel watching it as
    NAME, on 127.0.0.1, each in a directory of its own under .dir.
    .master and .replicas are harness.Redis objects (as started: after a
    failover .master is the old master); .sentinels the sentinels' ports.
    The sentinels call the master down after down_after ms and give a
    failover failover_timeout ms: small, so that tests stay short, and
    not so small that a busy machine makes them call a newly promoted
    master down.
    min_replicas: each server's min-replicas-to-write (a master refuses
    writes with fewer replicas attached), 0 for Redis's default (none).
    password: the servers' requirepass (and masterauth, and the
    sentinels' auth-pass); users: more ACL users on every server,
    (name, password) pairs with every right; sentinel_password: the
    sentinels' requirepass; tls: (ca, cert, key) files: servers and
    sentinels TLS only, replicating over TLS, clients with a
    certificate of that CA."""

    NAME = "mymaster"

    def __init__(self, name="sentinel", down_after=3000,
                 failover_timeout=5000, min_replicas=0, password=None,
                 users=(), sentinel_password=None, tls=None):
        self.dir = make_www_dir(f"mruby-{name}-")
        self.down_after = down_after
        self.failover_timeout = failover_timeout
        self.password = password
        self.sentinel_password = sentinel_password
        self.tls = tls
        args = ["--min-replicas-to-write", str(min_replicas)]
        if password:
            args += ["--requirepass", password, "--masterauth", password]
        for user, secret in users:
            args += ["--user", user, "on", f">{secret}", "~*", "&*",
                     "+@all"]
        if tls:
            args += ["--tls-replication", "yes"]
        auth = (None, password) if password else None
        self.master = Redis(args=args, dir=self._subdir("master"),
                            auth=auth, tls=tls)
        self.replicas = [Redis(args=list(args),
                               dir=self._subdir(f"replica{i}"),
                               auth=auth, tls=tls)
                         for i in range(2)]
        self.sentinels = [free_port() for _ in range(3)]
        self.procs = []

    def _subdir(self, name):
        d = os.path.join(self.dir, name)
        os.mkdir(d)
        os.chmod(d, 0o755)
        return d

    def addresses(self):
        """The sentinels as "host:port" Strings."""
        return [f"127.0.0.1:{p}" for p in self.sentinels]

    def nodes(self):
        return [self.master] + self.replicas

    def start(self):
        try:
            self.master.start()
            for r in self.replicas:
                r.args += ["--replicaof", self.master.host,
                           str(self.master.port)]
                r.start()
            for i, port in enumerate(self.sentinels):
                self._start_sentinel(i, port)
            self._wait("the sentinels did not start", lambda: all(
                self.ask(p, "PING") == "PONG" for p in self.sentinels))
            for port in self.sentinels:
                # INFO every 200 ms rather than 10 s: the old master is made
                # a replica at a sentinel's INFO, 4 hello periods (8 s)
                # after the switch.  Not shorter hello periods: a sentinel
                # turns a replica that says it is a master back into a
                # replica after 4 of them without news, and so undid
                # promotions still waiting for their switch
                self.ask(port, "SENTINEL", "DEBUG", "info-period", 200)
            self._wait("the replicas and sentinels did not find each other",
                       self._ready)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_sentinel(self, i, port):
        d = self._subdir(f"sentinel{i}")
        conf = os.path.join(d, "sentinel.conf")
        if self.tls:
            ca, cert, key = self.tls
            listen = (f"port 0\ntls-port {port}\ntls-ca-cert-file {ca}\n"
                      f"tls-cert-file {cert}\ntls-key-file {key}\n"
                      f"tls-auth-clients yes\ntls-replication yes\n")
        else:
            listen = f"port {port}\n"
        if self.sentinel_password:
            listen += f"requirepass {self.sentinel_password}\n"
        if self.password:
            listen += f"sentinel auth-pass {self.NAME} {self.password}\n"
        with open(conf, "w") as f:
            f.write(f"{listen}bind 127.0.0.1\nprotected-mode no\n"
                    f"daemonize no\ndir {d}\n"
                    f"logfile {os.path.join(d, 'sentinel.log')}\n"
                    f"sentinel monitor {self.NAME} 127.0.0.1 "
                    f"{self.master.port} 2\n"
                    f"sentinel down-after-milliseconds {self.NAME} "
                    f"{self.down_after}\n"
                    f"sentinel failover-timeout {self.NAME} "
                    f"{self.failover_timeout}\n"
                    f"sentinel parallel-syncs {self.NAME} 2\n")
        self.procs.append(subprocess.Popen(
            [REDIS_SENTINEL_BIN, conf], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            start_new_session=True))

    def _wait(self, what, ready, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            if time.monotonic() > deadline:
                raise HarnessError(what)
            time.sleep(0.1)

    def _ready(self):
        info = self.master.command("INFO", "replication")
        if info.count("state=online") != 2:
            return False
        for port in self.sentinels:
            if (self.ask(port, "SENTINEL", "REPLICAS", self.NAME)
                    .count("master-link-status\nok") != 2
                    or self.ask(port, "SENTINEL", "SENTINELS", self.NAME)
                    .count("runid") != 2):
                return False
        return True

    def ask(self, port, *args):
        """A command to the sentinel on port through redis-cli (the whole
        reply, as text)."""
        cli = [REDIS_CLI_BIN, "-h", "127.0.0.1", "-p", str(port)]
        if self.tls:
            ca, cert, key = self.tls
            cli += ["--tls", "--cacert", ca, "--cert", cert, "--key", key]
        if self.sentinel_password:
            cli += ["--no-auth-warning", "-a", self.sentinel_password]
        out = subprocess.run([*cli, *map(str, args)],
                             stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=STOP_TIMEOUT)
        return out.stdout.strip()

    def master_port(self, sentinel=None):
        """The master's port as a sentinel names it."""
        reply = self.ask(sentinel or self.sentinels[0], "SENTINEL",
                         "GET-MASTER-ADDR-BY-NAME", self.NAME).split()
        return int(reply[1])

    def node(self, port):
        return next(n for n in self.nodes() if n.port == port)

    def failover(self, timeout=30):
        """SENTINEL FAILOVER, then waits until every sentinel names the new
        master, it says so itself (ROLE) and both others replicate it.
        Returns the new master (a harness.Redis)."""
        old = self.master_port()
        # NOGOODSLAVE until the sentinel has fresh INFO of the replicas
        deadline = time.monotonic() + timeout
        while True:
            reply = self.ask(self.sentinels[0], "SENTINEL", "FAILOVER",
                             self.NAME)
            if reply == "OK":
                break
            if time.monotonic() > deadline:
                raise HarnessError(f"SENTINEL FAILOVER: {reply}")
            time.sleep(0.1)

        def switched():
            ports = {self.master_port(p) for p in self.sentinels}
            return len(ports) == 1 and old not in ports

        self._wait("the sentinels did not all name a new master",
                   switched, timeout)
        new = self.node(self.master_port())

        def settled():
            info = new.command("INFO", "replication")
            return ("role:master" in info
                    and info.count("state=online") == 2)

        self._wait("the old master and the replica did not follow the new "
                   "master", settled, timeout)
        return new

    def stop(self):
        for p in self.procs:
            stop_process(p)
        self.procs = []
        for n in self.nodes():
            n.stop()

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
