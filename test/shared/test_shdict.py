"""The shared dictionary on real servers: the Ruby API (one script, the same
answers under Apache and nginx), configuration errors, atomic increments
from several worker processes, and contents kept across a graceful restart
or reload, also one that loads a replaced module file."""

import concurrent.futures
import os
import shutil

import pytest
import requests

import harness

# One script for both servers: every answer on its own line.
API_SCRIPT = r'''
Server = get_server_class
d = Server::SharedDict.new("cache")
d.flush_all
out = []
d["s"] = "str";                out << d["s"].inspect
d.set("i", 42);                out << d.get("i").inspect
d.set("f", 1.5, ttl: 60);      out << d["f"].inspect
d["t"] = true;                 out << d["t"].inspect
d["F"] = false;                out << d["F"].inspect
d["F"] = nil;                  out << d["F"].inspect
d["bin\0key"] = "v\0\xff";     out << d["bin\0key"].bytes.inspect
out << d.add("s", "other").inspect
out << d.add("new", 1).inspect
out << d.incr("c").inspect
out << d.incr("c", 1, init: 10).inspect
out << d.incr("c", 5).inspect
out << d.incr("c", 0.5).inspect
out << d.ttl("s").inspect
out << (d.ttl("f") > 59).inspect
out << d.ttl("none").inspect
out << d.delete("new").inspect
out << d.delete("new").inspect
out << d.size.inspect
out << d.keys.sort.inspect
out << d.hold("/var/www/x.php").inspect
out << d.release("/var/www/x.php").inspect
begin
  d.incr("s")
rescue TypeError => e
  out << e.message
end
begin
  Server::SharedDict.new("nope")
rescue Server::SharedDict::Error => e
  out << e.message
end
d.flush_all
out << d.size.inspect
Server.rputs out.join("\n")
'''

API_EXPECTED = "\n".join([
    '"str"',
    "42",
    "1.5",
    "true",
    "false",
    "nil",
    "[118, 0, 255]",
    "false",
    "true",
    "nil",
    "11",
    "16",
    "16.5",
    "-1",
    "true",
    "nil",
    "true",
    "false",
    "6",
    '["bin\\x00key", "c", "f", "i", "s", "t"]',
    "1",
    "0",
    'shared dictionary "cache": the value is not a number',
    'no shared dictionary named "nope": declare it with mrubySharedDict '
    "(Apache) or mruby_shared_dict (nginx), or open it first in a "
    "post_config / mruby_init script (not in a startup script)",
    "0",
])

# Where the answering process is (mruby has no Process.pid).
PID = 'File.open("/proc/self/stat") { |f| f.read }.split(" ")[0]'


def apache_with(apache, handlers, mpm="event", size="1m", **kw):
    """Apache with mrubySharedDict cache <size> and one handler script per
    location: {"/path": "ruby code"}."""
    files = {}
    conf = [f"mrubySharedDict cache {size}"]
    for i, (loc, code) in enumerate(handlers.items()):
        files[f"h{i}.rb"] = code
        conf.append(f"<Location {loc}>\n    mrubyHandlerMiddle {{dir}}/h{i}.rb"
                    f"\n</Location>")
    return apache("\n".join(conf), mpm=mpm, files=files, **kw)


def nginx_with(nginx, handlers, workers=1, size="1m", **kw):
    files = {}
    locs = []
    for i, (loc, code) in enumerate(handlers.items()):
        files[f"h{i}.rb"] = code
        locs.append(f"location {loc} {{ mruby_content_handler {{dir}}/h{i}.rb; }}")
    conf = (f"mruby_shared_dict cache {size};\n"
            "server {\n    listen {port};\n" + "\n".join(locs) + "\n}")
    return nginx(conf.replace("{port}", "127.0.0.1:{port}"), workers=workers,
                 files=files, **kw)


def server_with(kind, apache, nginx, handlers, **kw):
    if kind == "apache":
        return apache_with(apache, handlers, **kw)
    return nginx_with(nginx, handlers, **kw)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_ruby_api(kind, apache, nginx):
    s = server_with(kind, apache, nginx, {"/api": API_SCRIPT})
    r = s.get("/api")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == API_EXPECTED


# The end of a script that tries the calls of its Array, one answer per
# line.
ARGS_TAIL = r'''
calls.each do |call|
  begin
    call.call
    out << "\nno error"
  rescue => e
    out << "\n#{e.class}: #{e.message}"
  end
end
Server.rputs out
'''

# hold and release read their arguments themselves: what they accept and
# refuse, one answer per line.
HOLD_ARGS_SCRIPT = r'''
Server = get_server_class
d = Server::SharedDict.new("cache")
d.flush_all
out = [d.hold("k", 2), d.hold("k"), d.release("k", 2), d.release("k", 5),
       d.release("k"), d.release("never")].inspect
calls = [-> { d.hold("") }, -> { d.hold(:k) }, -> { d.hold("k", 0) },
         -> { d.release("k", -1) }, -> { d.hold("k", "1") }, -> { d.hold },
         -> { d.release("k", 1, 2) }, -> { d.hold("k", by: 2) }]
''' + ARGS_TAIL

HOLD_ARGS_EXPECTED = "\n".join([
    "[2, 3, 1, 0, nil, nil]",
    "ArgumentError: SharedDict keys cannot be empty",
    "TypeError: Symbol cannot be converted to String",
    "ArgumentError: the count must be positive",
    "ArgumentError: the count must be positive",
    "TypeError: String cannot be converted to Integer",
    "ArgumentError: wrong number of arguments (given 0, expected 1..2)",
    "ArgumentError: wrong number of arguments (given 3, expected 1..2)",
    "ArgumentError: hold takes no keywords",
])


# The other methods read their arguments themselves too (keywords
# included): what they accept and refuse, one answer per line.  new takes
# its name through Class#new, which passes initialize an empty Hash of
# keywords.
ARGS_SCRIPT = r'''
Server = get_server_class
d = Server::SharedDict.new(*["cache"], **{})
d.flush_all
out = [d.incr("n", 2, init: 10, ttl: 60), d.incr("n", ttl: 60),
       d.set("k", "v", ttl: 60), d.add("k", "w", ttl: 1), d.get("k"),
       d.delete("k"), d.ttl("n") > 59].inspect
calls = [-> { Server::SharedDict.new },
         -> { Server::SharedDict.new(:cache) },
         -> { d.get }, -> { d.get("k", "l") }, -> { d.get("k", ttl: 1) },
         -> { d.set("k") }, -> { d.set("k", 1, tll: 1) },
         -> { d.incr("n", 1, init: 1, by: 2) }, -> { d.incr("", 1) },
         -> { d.delete(:k) }, -> { d.ttl }]
''' + ARGS_TAIL

# mruby 4.0 hands keywords to a method that declares none as a last Hash
# argument: one too many, not keywords
GET_WITH_KEYWORDS = (
    "ArgumentError: wrong number of arguments (given 2, expected 1)"
    if harness.mruby_release_no() >= 40000
    else "ArgumentError: get takes no keywords")

ARGS_EXPECTED = "\n".join([
    "[12, 13, \"v\", false, \"v\", true, true]",
    "ArgumentError: wrong number of arguments (given 0, expected 1)",
    "TypeError: Symbol cannot be converted to String",
    "ArgumentError: wrong number of arguments (given 0, expected 1)",
    "ArgumentError: wrong number of arguments (given 2, expected 1)",
    GET_WITH_KEYWORDS,
    "ArgumentError: wrong number of arguments (given 1, expected 2)",
    "ArgumentError: unknown keyword: tll",
    "ArgumentError: unknown keyword: by",
    "ArgumentError: SharedDict keys cannot be empty",
    "TypeError: Symbol cannot be converted to String",
    "ArgumentError: wrong number of arguments (given 0, expected 1)",
])


@pytest.mark.parametrize("kind", ["apache", "nginx"])
@pytest.mark.parametrize("script, expected", [
    (HOLD_ARGS_SCRIPT, HOLD_ARGS_EXPECTED), (ARGS_SCRIPT, ARGS_EXPECTED)],
    ids=["hold_release", "others"])
def test_method_arguments(kind, script, expected, apache, nginx):
    s = server_with(kind, apache, nginx, {"/args": script})
    r = s.get("/args")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == expected


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_unknown_dictionary_is_a_clear_500(kind, apache, nginx):
    s = server_with(kind, apache, nginx, {
        "/nope": "get_server_class::SharedDict.new('nope')"})
    r = s.get("/nope")
    assert r.status_code == 500
    assert "no shared dictionary" not in r.text
    s.wait_log('no shared dictionary named "nope"')


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_full_dictionary_evicts_or_refuses(kind, apache, nginx):
    code = r'''
Server = get_server_class
d = Server::SharedDict.new("cache")
d.flush_all
d["first"] = "x"
2000.times { |i| d["k#{i}"] = "v" * 100 }
out = [d["first"].inspect, d["k1999"].size]
begin
  d.safe_set("more", "v" * 100)
rescue Server::SharedDict::FullError => e
  out << e.message
end
Server.rputs out.join("\n")
'''
    s = server_with(kind, apache, nginx, {"/full": code}, size="64k")
    r = s.get("/full")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == 'nil\n100\nshared dictionary "cache" is full'


@pytest.mark.parametrize("kind,directive", [
    ("apache", "mrubySharedDict cache 1x"),
    ("apache", "mrubySharedDict cache 1k"),
    ("apache", "mrubySharedDict cache 1m\nmrubySharedDict cache 2m"),
    ("apache", "mrubySharedDict bad/name 1m"),
    ("nginx", "mruby_shared_dict cache 1x;"),
    ("nginx", "mruby_shared_dict cache 1k;"),
    ("nginx", "mruby_shared_dict cache 1m;\nmruby_shared_dict cache 2m;"),
])
def test_bad_declarations_fail_the_config_test(kind, directive, apache, nginx):
    if kind == "apache":
        s = apache(directive, start=False)
    else:
        s = nginx(directive + "\nserver { listen 127.0.0.1:{port}; }",
                  start=False)
    rc, out = s.configtest()
    assert rc != 0
    want = {"1x": "invalid size", "1k": "out of range",
            "2m": "declared twice", "bad/name": "invalid shared dictionary name"}
    assert any(k in directive and v in out for k, v in want.items()), out


INCR = r'''
Server = get_server_class
r = Server::Request.new
d = Server::SharedDict.new("cache")
n = r.args.to_i
i = 0
while i < n
  d.incr("n", 1, init: 0)
  i += 1
end
Server.rputs File.open("/proc/self/stat") { |f| f.read }.split(" ")[0]
'''

GET_N = r'''
Server = get_server_class
Server.rputs Server::SharedDict.new("cache")["n"].inspect
'''


def hammer(server, path, requests_total, concurrency):
    """requests_total GETs of path, concurrency at a time, each on a new
    connection (so that they spread over the worker processes); returns
    the bodies."""
    def one(_):
        r = requests.get(server.url(path), timeout=60,
                         headers={"Connection": "close"})
        assert r.status_code == 200, r.text
        return r.text
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        return list(ex.map(one, range(requests_total)))


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_no_lost_update_across_worker_processes(kind, apache, nginx):
    """100,000 increments from 200 requests, 16 at a time, over several
    worker processes (Apache prefork, nginx with 2 workers)."""
    if kind == "apache":
        s = apache_with(apache, {"/incr": INCR, "/n": GET_N}, mpm="prefork")
    else:
        s = nginx_with(nginx, {"/incr": INCR, "/n": GET_N}, workers=2)
    pids = hammer(s, "/incr?500", 200, 16)
    assert len(set(pids)) >= 2, "all requests went to one process"
    assert s.get("/n").text == "100000"


SET_V = r'''
Server = get_server_class
d = Server::SharedDict.new("cache")
d["v"] = Server::Request.new.args
Server.rputs "ok"
'''

GET_V = r'''
Server = get_server_class
Server.rputs Server::SharedDict.new("cache")["v"].inspect
'''


def test_graceful_restart_keeps_contents_apache(apache):
    a = apache_with(apache, {"/set": SET_V, "/get": GET_V}, mpm="prefork")
    assert a.get("/set?kept").text == "ok"
    a.graceful()
    assert a.get("/get").text == '"kept"'

    # a different size is a different dictionary: it starts empty
    a.conf = a.conf.replace("mrubySharedDict cache 1m",
                            "mrubySharedDict cache 2m")
    a.graceful()
    assert a.get("/get").text == "nil"
    assert a.get("/set?again").text == "ok"
    a.graceful()
    assert a.get("/get").text == '"again"'


# A post_config script that opens a Cache store in Apache's parent.
OPEN_CACHE = r'''
Cache.new(:namespace => "parent")["opened"] = true
'''


def mapped(pid, name):
    """The files of /proc/<pid>/maps whose path holds name, one line per
    mapping: "path" or "path (deleted)"."""
    with open(f"/proc/{pid}/maps") as f:
        return [line.split(None, 5)[5].strip() for line in f
                if name in line]


def test_graceful_restart_loads_a_replaced_module_apache(apache):
    """A package upgrade replaces mod_mruby.so while Apache runs: the
    graceful restart after it maps the new file in the parent and in every
    child, while the dictionary keeps its contents.  The Cache store that
    a post_config script opens is mapped once in the parent, however many
    restarts ran that script."""
    module = "mod_mruby_copy.so"
    a = apache_with(apache, {"/set": SET_V, "/get": GET_V}, mpm="prefork",
                    mruby=False, start=False)
    a.write("pc.rb", OPEN_CACHE)
    path = os.path.join(a.dir, module)
    shutil.copyfile(harness.MOD_MRUBY, path)
    a.modules = (("mruby", path),)
    a.conf = "mrubyPostConfigMiddle {dir}/pc.rb\n" + a.conf
    a.start()
    assert a.get("/set?kept").text == "ok"

    for _ in range(3):
        # as dpkg does: the new file beside the old, renamed over it
        shutil.copyfile(harness.MOD_MRUBY, path + ".new")
        os.rename(path + ".new", path)
        a.graceful()
        for pid in [a.master_pid()] + a.worker_pids():
            maps = set(mapped(pid, module))
            assert maps == {path}, (pid, maps)
        assert a.get("/get").text == '"kept"'
        assert len(mapped(a.master_pid(), "parent.cache")) == 1


def test_reload_keeps_contents_nginx(nginx):
    n = nginx_with(nginx, {"/set": SET_V, "/get": GET_V}, workers=2)
    assert n.get("/set?kept").text == "ok"
    n.reload()
    assert n.get("/get").text == '"kept"'

    n.conf = n.conf.replace("mruby_shared_dict cache 1m",
                            "mruby_shared_dict cache 2m")
    n.reload()
    assert n.get("/get").text == "nil"
