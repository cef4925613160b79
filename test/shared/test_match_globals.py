"""The match globals ($~, $1, $&, ...) belong to the run that matched, on
nginx and on Apache's event and prefork MPMs, whatever the startup
scripts matched: a request never sees another's match, neither after it
nor while it waits, and a request that waits finds its own match when it
resumes."""

import concurrent.futures
import time

import pytest

import harness

# Startup scripts that match and name $1: the match globals exist when
# the interpreter is sealed (they used to stay as sealed globals whose new
# values every later request kept).
BOOT = '"boot" =~ /(b)oot/\n$boot = $1\n'

# /set?TOKEN matches TOKEN and answers its captures; /hold?TOKEN does the
# same, but sleeps between the match and the answer until /go?TOKEN;
# /peek?ARGS says whether /hold?ARGS has matched, and which match this
# request, which matched nothing, sees.
MATCH = r'''
Server = get_server_class
d = Server::SharedDict.new("gate")
tok = Server::Request.new.args
tok =~ /tok=(\w+)/
if Server::Request.new.uri == "/hold"
  d["set-" + tok] = "1"
  t = Time.now + 30
  sleep 0.05 until d["go-" + tok] || Time.now > t
end
Server.rputs "#{$1} #{$~ && $~[1]} #{$&}"
'''

PEEK = r'''
Server = get_server_class
tok = Server::Request.new.args
Server.rputs "#{Server::SharedDict.new("gate")["set-" + tok]}|" \
  "#{$1.inspect} #{$~.inspect} #{$&.inspect} #{$+.inspect} " \
  "#{Regexp.last_match.inspect}"
'''

GO = r'''
Server = get_server_class
Server::SharedDict.new("gate")["go-" + Server::Request.new.args] = "1"
Server.rputs "go"
'''

FILES = {"boot.rb": BOOT, "match.rb": MATCH, "peek.rb": PEEK, "go.rb": GO}
ROUTES = {"/set": "match.rb", "/hold": "match.rb", "/peek": "peek.rb",
          "/go": "go.rb"}
NOTHING = "nil nil nil nil nil"


def server(kind, apache, nginx):
    """Both kinds of startup script name $1."""
    return harness.one_interpreter(
        kind, apache, nginx, ROUTES, FILES,
        nginx_main="mruby_init {dir}/boot.rb;\n"
                   "mruby_init_worker {dir}/boot.rb;\n"
                   "mruby_shared_dict gate 1m;\n",
        apache_main="mrubyPostConfigMiddle {dir}/boot.rb\n"
                    "mrubyChildInitMiddle {dir}/boot.rb\n"
                    "mrubySharedDict gate 1m\n")


def peek(s, args="none"):
    """What /peek sees (asserted to be no match), and the flag of the
    /hold with these args."""
    r = s.get("/peek?" + args)
    assert r.status_code == 200, s.error_log()[-2000:]
    flag, seen = r.text.split("|")
    assert seen == NOTHING
    return flag


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
def test_the_next_request_never_sees_a_match(kind, apache, nginx):
    """A request that matched nothing sees no $1, $~, $&, $+ nor
    Regexp.last_match after one that did.  (It used to read the previous
    request's token in $1 and its MatchData in $~.)"""
    s = server(kind, apache, nginx)
    peek(s)
    for tok in ("alpha", "beta", "gamma"):
        r = s.get("/set?tok=" + tok)
        assert (r.status_code, r.text) == (200, f"{tok} {tok} tok={tok}")
        peek(s)


@pytest.mark.parametrize("kind", ["nginx", "apache-event"])
def test_a_waiting_requests_match_is_its_own(kind, apache, nginx):
    """While /hold?tok=a sleeps after its match, the requests on its
    interpreter see nothing of it, and one that matches its own token
    leaves nothing for it either: /hold finds its own captures when it
    wakes.  (Requests meanwhile used to read "a" in $1, and /hold woke up
    with the last of their captures.)"""
    s = server(kind, apache, nginx)

    def wait_held(tok):
        deadline = time.monotonic() + 30
        while peek(s, "tok=" + tok) != "1":
            assert time.monotonic() < deadline, f"/hold?tok={tok} never held"
            time.sleep(0.05)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(s.get, "/hold?tok=a", timeout=60)
        wait_held("a")
        r = s.get("/set?tok=b")
        assert (r.status_code, r.text) == (200, "b b tok=b")
        peek(s)
        assert s.get("/go?tok=a").text == "go"
        r = held.result(60)
        assert (r.status_code, r.text) == (200, "a a tok=a")
    peek(s)
    r = s.get("/set?tok=c")
    assert (r.status_code, r.text) == (200, "c c tok=c")
