"""Cache.new (mruby-localmemcache's API) on real servers: a store in a file
that any worker process makes or opens, at any phase (a request, a child's
startup, nginx's mruby_set), shared by every process that opens the same
namespace or file; where the files go and who owns them; names refused;
and a limiter in the manner of the published access limiter's older
revision, whose child_init script opens its Cache and empties it."""

import concurrent.futures
import os
import pwd
import socket
import stat
import subprocess
import time

import pytest
import requests

import harness
import limiter_scripts

PID = harness.PID_RB

# Each request leaves its process's mark in the store and answers with its
# pid and every mark it sees.
MARK = r'''
c = Cache.new(:namespace => "marks")
pid = ''' + PID + r'''
c["w" + pid] = pid
get_server_class.rputs "#{pid} #{c.keys.sort.join(",")}"
'''


def hammer(server, path, total, concurrency):
    """total GETs of path, concurrency at a time, each on a connection of
    its own (so that they spread over the worker processes)."""
    def one(_):
        r = requests.get(server.url(path), timeout=60,
                         headers={"Connection": "close"})
        assert r.status_code == 200, server.error_log()[-2000:]
        return r.text
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        return list(ex.map(one, range(total)))


def assert_shared(server):
    """Several processes answered, and the last answer sees the mark of
    every one of them."""
    answers = hammer(server, "/mark", 60, 8)
    pids = {a.split(" ")[0] for a in answers}
    assert len(pids) >= 2, "all requests went to one process"
    last = server.get("/mark", headers={"Connection": "close"}).text
    seen = set(last.split(" ")[1].split(","))
    assert {"w" + p for p in pids} <= seen, last


def serve(kind, apache, nginx, routes, apache_main="", nginx_main="",
          **kw):
    """A server of kind ("apache", "apache-prefork", "nginx") whose routes
    {"/path": "ruby code"} are content handlers, after the main lines given
    (startup scripts, directives)."""
    files = {f"h{i}.rb": code for i, code in enumerate(routes.values())}
    if kind == "nginx":
        locs = "".join(f"    location {path} {{ mruby_content_handler "
                       f"{{dir}}/h{i}.rb; }}\n"
                       for i, path in enumerate(routes))
        return nginx(nginx_main + "server {\n    listen 127.0.0.1:{port};\n"
                     + locs + "}\n", files=files, **kw)
    locs = "".join(f"<Location {path}>\n    mrubyHandlerMiddle {{dir}}/h{i}.rb"
                   f"\n</Location>\n" for i, path in enumerate(routes))
    mpm = kind.split("-")[1] if "-" in kind else "event"
    return apache(apache_main + locs, mpm=mpm, files=files, **kw)


def cache_dir(server):
    if isinstance(server, harness.Apache):
        return os.path.join(server.run_dir, "mruby-cache")
    return os.path.join(server.logs, "nginx-mruby-cache")


def assert_owned_by_workers(path, mode):
    st = os.stat(path)
    assert st.st_uid == pwd.getpwnam("www-data").pw_uid, path
    assert stat.S_IMODE(st.st_mode) == mode, (path, oct(st.st_mode))


@pytest.mark.parametrize("kind", ["apache-prefork", "apache-event", "nginx"])
def test_namespace_shared_by_workers(kind, apache, nginx):
    """Workers make the store on their first request, with nothing
    declared and no startup script: each sees what the others wrote.  The
    file is in the default Cache directory, the workers' own."""
    s = serve(kind, apache, nginx, {"/mark": MARK},
              **({"workers": 2} if kind == "nginx" else {}))
    assert_shared(s)
    d = cache_dir(s)
    assert_owned_by_workers(d, 0o700)
    assert os.listdir(d) == ["marks.cache"]
    assert_owned_by_workers(os.path.join(d, "marks.cache"), 0o600)


# :filename names the file itself; the directive moves namespaces
FILENAME = r'''
c = Cache.new(:filename => "{dir}/stores/by_path.lmc", :size_mb => 2)
n = Cache.new(:namespace => "moved")
n["k"] = "v"
c["hits"] = (c["hits"].to_i + 1).to_s
get_server_class.rputs "#{c["hits"]} #{c.shm_status[:total_bytes]}"
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_filename_and_cache_dir(kind, apache, nginx):
    """Cache.new(:filename => path) is the file at path, made with size_mb;
    mrubyCacheDir / mruby_cache_dir put namespaces where they say."""
    s = serve(kind, apache, nginx, {"/file": ""},
              apache_main="mrubyCacheDir {dir}/namespaces\n",
              nginx_main="mruby_cache_dir {dir}/namespaces;\n", start=False)
    s.write("h0.rb", s.subst(FILENAME))
    stores = os.path.join(s.dir, "stores")
    os.makedirs(stores)
    os.chown(stores, pwd.getpwnam("www-data").pw_uid, -1)
    s.start()
    assert s.get("/file").text == "1 2097152"
    assert s.get("/file").text == "2 2097152"
    assert os.path.getsize(os.path.join(stores, "by_path.lmc")) == 2097152
    assert_owned_by_workers(os.path.join(stores, "by_path.lmc"), 0o600)
    assert os.listdir(os.path.join(s.dir, "namespaces")) == ["moved.cache"]
    assert not os.path.exists(cache_dir(s))


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_cache_dir_that_cannot_be_made(kind, apache, nginx):
    """A warning at startup, and Cache.new says the same to the script;
    the server serves."""
    s = serve(kind, apache, nginx, {"/n": """
begin
  Cache.new(:namespace => "n")
rescue Cache::InitError => e
  get_server_class.rputs e.message
end
"""}, apache_main="mrubyCacheDir /nonexistent/cache\n",
              nginx_main="mruby_cache_dir /nonexistent/cache;\n")
    directive = "mrubyCacheDir" if kind == "apache" else "mruby_cache_dir"
    s.wait_log('cannot make the Cache directory "/nonexistent/cache": No '
               f"such file or directory ({directive})")
    assert s.get("/n").text == ('cannot make a Cache store beside '
                                '"/nonexistent/cache/n.cache": No such file '
                                "or directory")


# mruby_set: a variable from a store made in the phase that sets it
SET_UPSTREAM = r'''
c = Cache.new(:namespace => "upstreams")
c["backend"] = "127.0.0.1:8080" unless c["backend"]
c["backend"]
'''

GET_UPSTREAM = r'''
Nginx.rputs Cache.new(:namespace => "upstreams")["backend"].inspect
'''


def test_made_inside_mruby_set_nginx(nginx):
    n = nginx("""
server {
    listen 127.0.0.1:{port};
    location /set {
        mruby_set $backend {dir}/set.rb;
        return 200 "backend=$backend";
    }
    location /get { mruby_content_handler {dir}/get.rb; }
}""", files={"set.rb": SET_UPSTREAM, "get.rb": GET_UPSTREAM})
    r = n.get("/set")
    assert r.text == "backend=127.0.0.1:8080", n.error_log()[-2000:]
    assert n.get("/get").text == '"127.0.0.1:8080"'


# A child's startup script opens the store and keeps it in Userdata; the
# request scripts of every child use it.
CHILD_INIT = r'''
Userdata.new.store = Cache.new(:namespace => "from_child")
'''

CHILD_USE = r'''
c = Userdata.new.store
pid = ''' + PID + r'''
c["w" + pid] = pid
get_server_class.rputs "#{pid} #{c.keys.sort.join(",")}"
'''


@pytest.mark.parametrize("kind", ["apache-prefork", "apache-event", "nginx"])
def test_opened_in_child_init(kind, apache, nginx):
    """A child_init (Apache) or mruby_init_worker (nginx) script opens it."""
    s = serve(kind, apache, nginx, {"/mark": CHILD_USE},
              apache_main="mrubyChildInitMiddle {dir}/init.rb\n",
              nginx_main="mruby_init_worker {dir}/init.rb;\n",
              **({"workers": 2} if kind == "nginx" else {}), start=False)
    s.write("init.rb", CHILD_INIT)
    s.start()
    assert_shared(s)
    assert "mrubyChildInit" not in s.error_log()
    assert "mruby_init_worker" not in s.error_log()


# What is refused, and how: one answer a line.
BAD = r'''
out = []
["../escape", "a/b", ".hidden", "", "x" * 64, "sp ace"].each do |name|
  begin
    Cache.new(:namespace => name)
    out << "opened #{name}"
  rescue ArgumentError => e
    out << e.message
  end
end
[{:filename => "relative.lmc"}, {:filename => "/"}, {},
 {:namespace => "big", :size_mb => 5000}, "not a hash"].each do |opts|
  begin
    Cache.new(opts)
    out << "opened #{opts}"
  rescue ArgumentError => e
    out << e.message
  end
end
begin
  Cache.new(:filename => "/nonexistent/dir/x.lmc")
rescue Cache::InitError => e
  out << e.message
end
c = Cache.new(:namespace => "ok-name_1.2")
c.close
begin
  c["k"]
rescue Cache::MemoryPoolClosed => e
  out << e.message
end
get_server_class.rputs out.join("\n")
'''

NAME_RULE = ("(1 to 63 letters, digits, '_', '-' or '.', not starting "
             "with '.')")
BAD_EXPECTED = "\n".join([
    f'invalid Cache namespace "../escape" {NAME_RULE}',
    f'invalid Cache namespace "a/b" {NAME_RULE}',
    f'invalid Cache namespace ".hidden" {NAME_RULE}',
    f'invalid Cache namespace "" {NAME_RULE}',
    f'invalid Cache namespace "{"x" * 64}" {NAME_RULE}',
    f'invalid Cache namespace "sp ace" {NAME_RULE}',
    'invalid Cache file name "relative.lmc" (an absolute path of a file)',
    'invalid Cache file name "/" (an absolute path of a file)',
    "Cache.new needs :namespace or :filename",
    "a Cache store's size is 32k to 4095m, not 5242880000 bytes",
    "Cache.new takes a Hash of options",
    'cannot make a Cache store beside "/nonexistent/dir/x.lmc": '
    "No such file or directory",
    "Pool is closed",
])


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_bad_names_refused(kind, apache, nginx):
    s = serve(kind, apache, nginx, {"/bad": BAD})
    r = s.get("/bad")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == BAD_EXPECTED
    assert os.listdir(cache_dir(s)) == ["ok-name_1.2.cache"]
    assert not os.path.exists(os.path.join(s.dir, "escape.cache"))
    assert not os.path.exists(os.path.join(s.logs, "escape.cache"))


def test_stream_and_http_share_the_directory_nginx(nginx):
    """The stream module's scripts find the http module's namespaces: the
    same default directory."""
    n = serve("nginx", None, nginx, {"/get": GET_UPSTREAM}, stream_conf="""
server {
    listen 127.0.0.1:{port2};
    mruby_stream_code 'Cache.new(:namespace => "upstreams")["backend"] = "from stream"';
    return "x";
}""")
    with socket.create_connection(("127.0.0.1", n.port2), timeout=10) as c:
        assert harness.read_until_closed(c) == b"x"
    assert n.get("/get").text == '"from stream"', n.error_log()[-2000:]


KEEP_SET = r'''
Cache.new(:namespace => "kept")["v"] = get_server_class::Request.new.args
get_server_class.rputs "ok"
'''

KEEP_GET = r'''
get_server_class.rputs Cache.new(:namespace => "kept")["v"].inspect
'''


@pytest.mark.parametrize("kind", ["apache-prefork", "nginx"])
def test_kept_across_graceful_restart_and_reload(kind, apache, nginx):
    """The workers of the next generation open the same file."""
    s = serve(kind, apache, nginx, {"/set": KEEP_SET, "/get": KEEP_GET})
    assert s.get("/set?kept").text == "ok"
    if kind == "nginx":
        s.reload()
    else:
        s.graceful()
    assert s.get("/get", headers={"Connection": "close"}).text == '"kept"'


# A store larger than the room left on its file system (a small tmpfs)
FULL_FS = r'''
begin
  c = Cache.new(:filename => "{dir}/small/big.lmc", :size_mb => 1)
  64.times { |i| c["k#{i}"] = "x" * 12000 }
  get_server_class.rputs "written"
rescue Cache::InitError => e
  get_server_class.rputs e.message
end
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_file_system_too_small_is_an_error(kind, apache, nginx):
    """The store's blocks are taken when it is made: a file system without
    room for them is a Cache::InitError, not a worker killed by SIGBUS at
    the first write to a page the file system cannot give."""
    s = serve(kind, apache, nginx, {"/full": ""}, start=False)
    small = os.path.join(s.dir, "small")
    os.makedirs(small)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0777",
                       "tmpfs", small]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        s.write("h0.rb", s.subst(FULL_FS))
        s.start()
        r = s.get("/full")
        assert (r.status_code, r.text) == (200, (
            f'cannot make the Cache store "{small}/big.lmc" of 1048576 '
            "bytes: No space left on device")), s.error_log()[-2000:]
        assert os.listdir(small) == []
    finally:
        s.stop()
        subprocess.run(["umount", small], check=True)


# An existing store keeps the size it was made with.
SIZES = r'''
a = Cache.new(:namespace => "sized", :size_mb => 2)
b = Cache.new(:namespace => "sized", :size_mb => 4)
a["k"] = "v"
st = b.shm_status
get_server_class.rputs [st[:total_bytes], b["k"], st[:used_bytes] > 0,
                        st[:free_bytes] > 0, b.size].inspect
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_existing_store_keeps_its_size(kind, apache, nginx):
    s = serve(kind, apache, nginx, {"/s": SIZES})
    assert s.get("/s").text == '[2097152, "v", true, true, 1]'


# The slow page (mod_php's place): waits for the test's gate.
SLOW = r'''
Apache.sleep 0.01 until File.exist?("{dir}/gate")
Apache.rputs "loaded"
'''

READY = r'''
Apache.errlogger Apache::LOG_NOTICE, "child ready"
'''

# Twelve children from the start and no more: each new child's init empties
# the Cache, so one started in the middle of the burst would wipe the counts
# of the requests already in.
PREFORK_TWELVE = """\
StartServers 12
MinSpareServers 1
MaxSpareServers 16
ServerLimit 16
MaxRequestWorkers 16
MaxConnectionsPerChild 0
"""


def test_limiter_emptying_its_cache_in_child_init_prefork(apache):
    """The limiter of limiter_scripts.py with its Cache opened and emptied
    in child_init, as the published limiter's older revision does it.
    Threshold 2, ten requests at once to a slow .php: two load, eight get
    503, and the count goes back to nothing."""
    a = apache("""
mrubyPostConfigMiddle         {dir}/limiter/post_config.rb cache
mrubyChildInitMiddle          {dir}/limiter/child_init.rb cache
mrubyChildInitLast            {dir}/ready.rb
<FilesMatch ^.*\\.php$>
  mrubyAccessCheckerMiddle      {dir}/limiter/access.rb cache
  mrubyLogTransactionMiddle     {dir}/limiter/log.rb cache
  mrubyHandlerMiddle            {dir}/slow.rb
</FilesMatch>
<Location /count>
  mrubyHandlerMiddle {dir}/count.rb
</Location>
""", mpm="prefork", mpm_conf=PREFORK_TWELVE, files={
        "limiter/post_config.rb": limiter_scripts.POST_CONFIG,
        "limiter/child_init.rb": limiter_scripts.CHILD_INIT,
        "limiter/access.rb": limiter_scripts.ACCESS,
        "limiter/log.rb": limiter_scripts.LOG,
        "ready.rb": READY,
        "count.rb": limiter_scripts.COUNT}, start=False)
    a.write("slow.rb", a.subst(SLOW))
    a.start()
    deadline = time.monotonic() + 30
    while a.error_log().count("child ready") < 12:
        assert time.monotonic() < deadline, a.error_log()[-3000:]
        time.sleep(0.05)
    a.write_doc("sleep.php", "<?php sleep(3); ?>")
    page = os.path.join(a.docroot, "sleep.php")

    def one(_):
        return requests.get(a.url("/sleep.php"), timeout=60,
                            headers={"Connection": "close"})
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        futures = [ex.submit(one, i) for i in range(10)]
        deadline = time.monotonic() + 30
        while sum(f.done() for f in futures) < 8:
            assert time.monotonic() < deadline, "refusals did not come"
            time.sleep(0.02)
        a.write("gate", "")
        rs = [f.result() for f in futures]
    assert sorted(r.status_code for r in rs) == [200] * 2 + [503] * 8
    log = a.error_log()
    assert "taken over" not in log
    for n in range(1, 4):
        assert f"in_flight: {page} now {n}" in log
    assert log.count(f"in_flight: {page} over 2, answered 503") == 8
    deadline = time.monotonic() + 10
    while a.get("/count?" + page).text != "nil":
        assert time.monotonic() < deadline, a.error_log()[-3000:]
        time.sleep(0.05)
