"""The standard library scripts get (src/lib) on real servers: one script
per class, the same answers under Apache and nginx, run several times so
that cached scripts (and their cached patterns) are exercised, and nothing
one request matched is seen by the next."""

import pytest

import harness

# A routing script in the originals' style: literals, captures, $1, named
# groups, case/when, sub/gsub/scan/split.
ROUTE_SCRIPT = r'''
Server = get_server_class
r = Server::Request.new
uri = r.uri
out = []
out << "before=#{$~.inspect},#{$1.inspect}"
case uri
when /\.(css|js|png)$/ then out << "static #{$1}"
when %r{^/api/v(\d+)/users/(?<id>\d+)} then
  out << "api v#{$1} user #{Regexp.last_match[:id]}"
else out << "other"
end
out << (uri =~ /users/).inspect
out << uri.sub(/\/v\d+\//, "/vX/")
out << uri.gsub(/\d+/) { |d| (d.to_i * 2).to_s }
out << uri.scan(/[a-z]+/).join(",")
out << uri.split(%r{/+}).reject(&:empty?).inspect
out << (uri =~ /\A\/API/i ? "ci" : "cs")
Server.rputs out.join("\n")
'''

ROUTE_API = "\n".join([
    "before=nil,nil",
    # a pattern with a named group captures only its named groups, in
    # CRuby and in the originals' mruby-onig-regexp: $1 is id's "123"
    "api v123 user 123",
    "8",
    "/api/vX/users/123",
    "/api/v4/users/246",
    "api,v,users",
    '["api", "v2", "users", "123"]',
    "ci",
])

ROUTE_STATIC = "\n".join([
    "before=nil,nil",
    "static png",
    "nil",
    "/img/a.png",
    "/img/a.png",
    "img,a,png",
    '["img", "a.png"]',
    "cs",
])


def server_with(kind, apache, nginx, scripts, cache=None):
    """A server running scripts ({"name": code}) at /name."""
    files = {f"{name}.rb": code for name, code in scripts.items()}
    if kind == "apache":
        locs = "\n".join(
            f"<LocationMatch ^/{name}>\n"
            f"    mrubyHandlerMiddle {{dir}}/{name}.rb{' ' + cache if cache else ''}\n"
            f"</LocationMatch>" for name in scripts)
        return apache(locs, files=files)
    locs = "\n".join(
        f"location /{name} {{ mruby_content_handler {{dir}}/{name}.rb"
        f"{' ' + cache if cache else ''}; }}" for name in scripts)
    return nginx("server {\n    listen 127.0.0.1:{port};\n" + locs + "\n}",
                 files=files)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_regexp_routing_script(kind, apache, nginx):
    s = server_with(kind, apache, nginx, {"api": ROUTE_SCRIPT,
                                          "img": ROUTE_SCRIPT})
    for _ in range(3):
        r = s.get("/api/v2/users/123")
        assert r.status_code == 200, s.error_log()[-2000:]
        assert r.text == ROUTE_API
        r = s.get("/img/a.png")
        assert r.status_code == 200, s.error_log()[-2000:]
        assert r.text == ROUTE_STATIC


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_regexp_error_is_a_500_with_its_line(kind, apache, nginx):
    s = server_with(kind, apache, nginx,
                    {"bad": 'Regexp.new("a(" + "")\n'})
    assert s.get("/bad").status_code == 500
    log = s.wait_log("RegexpError")
    assert "end pattern with unmatched parenthesis" in log


# JSON in and out, as an API script of the originals' era writes it.
JSON_SCRIPT = r'''
Server = get_server_class
r = Server::Request.new
doc = JSON.parse('{"user":{"id":7,"name":"Zoë","tags":["a","b"]},"ok":true}')
out = []
out << doc["user"]["name"]
out << JSON.generate(doc)
out << JSON.parse('{"a":[1,2]}', symbolize_names: true).inspect
out << { "path" => r.uri, "n" => 1.5, "nil" => nil }.to_json
begin
  JSON.parse("{oops")
rescue JSON::ParserError => e
  out << e.class.to_s
end
Server.rputs out.join("\n")
'''

JSON_EXPECTED = "\n".join([
    "Zoë",
    '{"user":{"id":7,"name":"Zoë","tags":["a","b"]},"ok":true}',
    "{:a=>[1, 2]}",
    '{"path":"/json","n":1.5,"nil":null}',
    "JSON::ParserError",
])


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_json_script(kind, apache, nginx):
    s = server_with(kind, apache, nginx, {"json": JSON_SCRIPT})
    for _ in range(2):
        r = s.get("/json")
        assert r.status_code == 200, s.error_log()[-2000:]
        assert r.content.decode("utf-8") == harness.inspected(JSON_EXPECTED)


# Signing a request the way the originals' scripts do (Digest, HMAC,
# Base64), and a token of SecureRandom.
DIGEST_SCRIPT = r'''
Server = get_server_class
out = []
out << Digest::SHA256.hexdigest("abc")
out << Digest::HMAC.hexdigest("msg", "secret", Digest::SHA1)
out << Base64.urlsafe_encode64(Digest::MD5.digest("abc"), padding: false)
out << (SecureRandom.hex(8) =~ /\A\h{16}\z/).inspect
Server.rputs out.join("\n")
'''

DIGEST_EXPECTED = "\n".join([
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    "ca3efb15cfaf530e0d771e5cbe707104f006b257",
    "kAFQmDzST7DWlj99KOF_cg",
    "0",
])


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_digest_script(kind, apache, nginx):
    s = server_with(kind, apache, nginx, {"sign": DIGEST_SCRIPT})
    r = s.get("/sign")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == DIGEST_EXPECTED


# Userdata carries a value from the access phase to the handler and across
# requests; a global set next to it is gone at the next request.
USERDATA_ACCESS = r'''
u = Userdata.new
u.hits = (u.hits || 0) + 1
u.seen_in_access = "yes"
$leak = "global"
'''

USERDATA_HANDLER = r'''
u = Userdata.new
get_server_class.rputs "#{u.hits} #{u.seen_in_access} #{$leak.inspect}"
'''

EXIT_SCRIPT = r'''
get_server_class.rputs "partial"
exit 1
'''


def test_userdata_across_phases_apache(apache):
    a = apache("""
<Location /u>
    mrubyAccessCheckerMiddle {dir}/access.rb
    mrubyHandlerMiddle {dir}/handler.rb
</Location>
<Location /exit>
    mrubyHandlerMiddle {dir}/exit.rb
</Location>
""", files={"access.rb": USERDATA_ACCESS, "handler.rb": USERDATA_HANDLER,
             "exit.rb": EXIT_SCRIPT})
    # Apache's children each keep their interpreters: the count is per
    # interpreter, what the access phase set is seen by the handler
    hits = []
    for _ in range(4):
        r = a.get("/u")
        assert r.status_code == 200, a.error_log()[-2000:]
        count, seen, leak = r.text.split(" ")
        assert (seen, leak) == ("yes", "nil")
        hits.append(int(count))
    assert max(hits) >= 2
    assert a.get("/exit").status_code == 500
    assert "SystemExit: exit(1) called in a script" in a.wait_log("SystemExit")
    assert a.get("/u").status_code == 200


def test_userdata_across_phases_nginx(nginx):
    n = nginx("""server {
    listen 127.0.0.1:{port};
    location /u {
        mruby_access_handler {dir}/access.rb;
        mruby_content_handler {dir}/handler.rb;
    }
    location /exit { mruby_content_handler {dir}/exit.rb; }
}""", files={"access.rb": USERDATA_ACCESS, "handler.rb": USERDATA_HANDLER,
             "exit.rb": EXIT_SCRIPT})
    assert n.get("/u").text == "1 yes nil"
    assert n.get("/u").text == "2 yes nil"
    assert n.get("/exit").status_code == 500
    assert "SystemExit: exit(1) called in a script" in n.wait_log("SystemExit")
    assert n.get("/u").text == "3 yes nil"


USLEEP_SCRIPT = r'''
t = Time.now
usleep 20_000
get_server_class.rputs((Time.now - t >= 0.02).to_s)
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_usleep_waits(kind, apache, nginx):
    """On nginx usleep suspends the request as sleep does (a script naming
    only usleep runs on a coroutine too)."""
    s = server_with(kind, apache, nginx, {"nap": USLEEP_SCRIPT})
    r = s.get("/nap")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == "true"


# The way of the access-limiter post's time: a Cache and a global Mutex
# opened at startup (the Mutex's opening makes its dictionary), used by
# every worker's requests.
CACHE_INIT = r'''
Cache.new(namespace: "limiter").clear
Mutex.new(global: true)
'''

CACHE_COUNT = r'''
c = Cache.new(namespace: "limiter")
m = Mutex.new(global: true, key: "counter")
n = m.synchronize do
  v = (c["count"] || "0").to_i + 1
  c["count"] = v.to_s
  v
end
get_server_class.rputs "#{n} #{c.get("count").class} #{m.locked?} #{c.get("none").inspect}"
'''


def test_cache_and_global_mutex_apache(apache):
    a = apache("""
mrubyPostConfigMiddle {dir}/init.rb
<Location /count>
    mrubyHandlerMiddle {dir}/count.rb
</Location>
""", files={"init.rb": CACHE_INIT, "count.rb": CACHE_COUNT})
    got = [a.get("/count").text for _ in range(5)]
    assert got == [f"{i} String false nil" for i in range(1, 6)]


def test_cache_and_global_mutex_nginx(nginx):
    n = nginx("""
mruby_init {dir}/init.rb;
server {
    listen 127.0.0.1:{port};
    location /count { mruby_content_handler {dir}/count.rb; }
}""", workers=2, files={"init.rb": CACHE_INIT, "count.rb": CACHE_COUNT})
    got = sorted(int(n.get("/count", headers={"Connection": "close"})
                     .text.split(" ")[0]) for _ in range(6))
    assert got == [1, 2, 3, 4, 5, 6]


DICT_OPEN = r'''
get_server_class::SharedDict.new("kept")
'''

DICT_SET = r'''
get_server_class::SharedDict.new("kept")["v"] = get_server_class::Request.new.args
get_server_class.rputs "ok"
'''

DICT_GET = r'''
get_server_class.rputs get_server_class::SharedDict.new("kept")["v"].inspect
'''


def test_default_dictionary_kept_across_graceful_apache(apache):
    """A dictionary a post_config script made keeps its contents across a
    graceful restart, as a declared one does."""
    a = apache("""
mrubyPostConfigMiddle {dir}/open.rb
<Location /set>
    mrubyHandlerMiddle {dir}/set.rb
</Location>
<Location /get>
    mrubyHandlerMiddle {dir}/get.rb
</Location>
""", mpm="prefork", files={"open.rb": DICT_OPEN, "set.rb": DICT_SET,
                           "get.rb": DICT_GET})
    assert a.get("/set?kept").text == "ok"
    a.graceful()
    assert a.get("/get").text == '"kept"'


def test_default_dictionary_kept_across_reload_nginx(nginx):
    n = nginx("""
mruby_init {dir}/open.rb;
server {
    listen 127.0.0.1:{port};
    location /set { mruby_content_handler {dir}/set.rb; }
    location /get { mruby_content_handler {dir}/get.rb; }
}""", workers=2, files={"open.rb": DICT_OPEN, "set.rb": DICT_SET,
                        "get.rb": DICT_GET})
    assert n.get("/set?kept").text == "ok"
    n.reload()
    assert n.get("/get").text == '"kept"'


FILE_ERROR = '''
begin
  File.open("/nonexistent/dir/file")
rescue SystemCallError => e
  get_server_class.rputs "#{e.class}: #{e.message}"
end
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_failed_file_open_raises_system_call_error(kind, apache, nginx):
    """mruby's IO calls SystemCallError._sys_fail once the library defines
    SystemCallError: without that method a failed File.open raised
    NoMethodError instead."""
    s = server_with(kind, apache, nginx, {"f": FILE_ERROR})
    r = s.get("/f")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text.startswith("SystemCallError: ")
    assert r.text.endswith("No such file or directory")
