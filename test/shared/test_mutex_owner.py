"""The owner of a Mutex is the run that locked it: requests of one worker
that share a Mutex a startup script made (global or not) wait for each
other's lock instead of failing, cannot unlock each other's, and a run
that ends holding a lock lets it go; on nginx and Apache's event MPM
(where runs wait in one interpreter) and prefork."""

import concurrent.futures
import time

import pytest

import harness

INIT = "G = Mutex.new(global: true)\nL = Mutex.new\n"

# ?global or ?local picks the startup Mutex.
PICK = r'''
Server = get_server_class
d = Server::SharedDict.new("gate")
m = Server::Request.new.args == "local" ? L : G
'''

# holds the lock until /release (or 30 s)
HOLD = PICK + r'''
m.synchronize do
  d["held"] = "1"
  t = Time.now + 30
  sleep 0.05 until d["release"] || Time.now > t
end
Server.rputs "held"
'''

WAIT = PICK + r'''
d["waiting"] = "1"
m.synchronize { d["got"] = "1" }
Server.rputs "got it"
'''

STEAL = PICK + r'''
begin
  m.unlock
  Server.rputs "unlocked"
rescue ThreadError => e
  Server.rputs e.message
end
'''

STATE = PICK + r'''
Server.rputs "#{d["held"]}#{d["waiting"]}#{d["got"]} #{m.locked?} #{m.owned?}"
'''

RELEASE = PICK + 'd["release"] = "1"\nServer.rputs "released"\n'

# ends its run holding the lock
LEAVE = PICK + 'm.lock\nServer.rputs "left #{m.owned?}"\n'

AGAIN = PICK + 'n = m.synchronize { 1 + 1 }\nServer.rputs "again #{n}"\n'

# ends its run holding a Mutex of its own whose __release owns it again
ROGUE = r'''
class Mutex
  def __release
    Mutex.__own(self)
  end
end
Mutex.new.lock
get_server_class.rputs "rogue"
'''

SCRIPTS = {"hold": HOLD, "wait": WAIT, "steal": STEAL, "state": STATE,
           "release": RELEASE, "leave": LEAVE, "again": AGAIN,
           "rogue": ROGUE}


def server(kind, apache, nginx):
    """The scripts at /NAME, and G and L made by a worker's startup."""
    files = {f"{name}.rb": code for name, code in SCRIPTS.items()}
    files["init.rb"] = INIT
    routes = {f"/{name}": f"{name}.rb" for name in SCRIPTS}
    return harness.one_interpreter(
        kind, apache, nginx, routes, files,
        nginx_main="mruby_shared_dict mruby_mutex 1m;\n"
                   "mruby_shared_dict gate 1m;\n"
                   "mruby_init_worker {dir}/init.rb;\n",
        apache_main="mrubySharedDict mruby_mutex 1m\n"
                    "mrubySharedDict gate 1m\n"
                    "mrubyChildInitMiddle {dir}/init.rb\n")


def answer(s, path):
    r = s.get(path, timeout=30)
    assert r.status_code == 200, s.error_log()[-2000:]
    return r.text


# An Apache child may have made a second interpreter for a request that
# came while /hold ran, with Mutexes of its own: a local one is not
# shared with it, and its global one is not locked in that interpreter.
@pytest.mark.parametrize("kind,which", [("nginx", "global"),
                                        ("nginx", "local"),
                                        ("apache-event", "global")])
def test_a_request_waits_for_the_lock_another_request_holds(
        kind, which, apache, nginx):
    """While /hold sleeps inside synchronize, /wait's synchronize waits
    (without blocking the worker: /state is answered meanwhile) and gets
    the lock once /hold lets it go; /steal cannot unlock it.  (/wait used
    to raise "deadlock; recursive locking", and /steal released /hold's
    lock.)"""
    s = server(kind, apache, nginx)

    def state_becomes(want):
        deadline = time.monotonic() + 30
        while answer(s, f"/state?{which}") != want:
            assert time.monotonic() < deadline, f"never {want!r}"
            time.sleep(0.05)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        hold = pool.submit(s.get, f"/hold?{which}", timeout=60)
        state_becomes("1 true false")
        stolen = answer(s, f"/steal?{which}")
        if kind == "nginx":
            assert stolen == ("attempt to unlock a mutex which is locked "
                              "by another run")
        else:
            assert stolen.startswith("attempt to unlock a mutex which is ")
        assert answer(s, f"/state?{which}") == "1 true false"
        wait = pool.submit(s.get, f"/wait?{which}", timeout=60)
        state_becomes("11 true false")
        assert answer(s, f"/release?{which}") == "released"
        r = hold.result(60)
        assert (r.status_code, r.text) == (200, "held")
        r = wait.result(60)
        assert (r.status_code, r.text) == (200, "got it"), \
            s.error_log()[-2000:]
    assert answer(s, f"/state?{which}") == "111 false false"


@pytest.mark.parametrize("which", ["global", "local"])
@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
def test_a_run_that_ends_holding_a_lock_lets_it_go(kind, which, apache,
                                                   nginx):
    """A request that locks and never unlocks leaves the lock free for the
    next one.  (The next request's lock used to raise "deadlock;
    recursive locking": the lock stayed with no one to unlock it.)"""
    s = server(kind, apache, nginx)
    for _ in range(2):
        assert answer(s, f"/leave?{which}") == "left true"
        assert answer(s, f"/state?{which}") == " false false"
        assert answer(s, f"/again?{which}") == "again 2"


@pytest.mark.parametrize("kind", ["nginx", "apache-event"])
def test_a_redefined_release_cannot_keep_the_run_from_ending(kind, apache,
                                                             nginx):
    """A script whose Mutex#__release owns the Mutex again ends holding
    it: its run ends, and the worker answers the next request.  (The end
    of the run used to release and re-own it for ever: the worker spun.)"""
    s = server(kind, apache, nginx)
    assert answer(s, "/rogue") == "rogue"
    assert answer(s, "/again?local") == "again 2"


def test_a_run_that_cannot_wait_is_told_instead_of_blocking(nginx):
    """nginx's log phase cannot wait: its G.lock, while /hold's run holds
    G asleep, raises and is logged, where blocking the worker between
    tries would have kept /hold from ever resuming to let go."""
    files = {f"{name}.rb": code for name, code in SCRIPTS.items()}
    files["init.rb"] = INIT
    files["loglock.rb"] = "G.lock\n"
    n = nginx("mruby_shared_dict mruby_mutex 1m;\nmruby_shared_dict gate 1m;\n"
              "mruby_init_worker {dir}/init.rb;\n"
              "server {\n    listen 127.0.0.1:{port};\n"
              "    location = /hold { mruby_content_handler {dir}/hold.rb; }\n"
              "    location = /state { mruby_content_handler "
              "{dir}/state.rb; }\n"
              "    location = /release { mruby_content_handler "
              "{dir}/release.rb; }\n"
              "    location = /logged { mruby_content_handler_code "
              "'Nginx.rputs \"logged\"'; mruby_log_handler "
              "{dir}/loglock.rb; }\n}\n", files=files)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        hold = pool.submit(n.get, "/hold?global", timeout=60)
        deadline = time.monotonic() + 30
        while answer(n, "/state?global") != "1 true false":
            assert time.monotonic() < deadline, "/hold never held"
            time.sleep(0.05)
        assert answer(n, "/logged") == "logged"
        assert "Mutex#lock: the lock is held by another run of this " \
            "interpreter, and this one: cannot wait here" in \
            n.wait_log("cannot wait here")
        assert answer(n, "/state?global") == "1 true false"
        assert answer(n, "/release?global") == "released"
        assert hold.result(60).text == "held"
    assert answer(n, "/state?global") == "1 false false"
