"""On prefork a child takes over the parent's post_config interpreter (its
copy, made by the fork), as the original mod_mruby's children did: what
post_config scripts define (a class, a constant, a method, a global,
Userdata holding a Cache and a global Mutex) is there in every child, and
the post_config scripts ran once, in the parent.  The published
http-access-limiter defines its class and its Userdata this way and uses
them from an access checker."""

import pytest

# The limiter's shape: post_config defines the class and keeps the shared
# objects in Userdata; the access checker counts with them.
INIT = r'''
Userdata.new.shared_mutex = Mutex.new(global: true)
Userdata.new.shared_cache = Cache.new(namespace: "inherited")
GREETING = "defined in post_config"
$started_in = Apache::Scoreboard.new.pid
def greet
  GREETING
end

class Counter
  def initialize(key)
    @key = key
  end

  def cache
    Userdata.new.shared_cache
  end

  def increment
    Userdata.new.shared_mutex.synchronize do
      v = cache[@key].to_i + 1
      cache[@key] = v.to_s
      v
    end
  end
end
Apache.errlogger Apache::APLOG_NOTICE, "post_config ran in #{$started_in}"
'''

CHECK = r'''
n = Counter.new("hits").increment
Apache::Request.new.headers_out["X-Hits"] = n.to_s
'''

SHOW = r'''
Apache.rputs "#{greet} #{$started_in} #{Apache::Scoreboard.new.pid}"
'''


def test_prefork_children_have_what_post_config_defined(apache):
    a = apache("""
mrubyPostConfigMiddle {dir}/init.rb
<Location /counted>
    mrubyAccessCheckerMiddle {dir}/check.rb
    mrubyHandlerMiddle {dir}/show.rb
</Location>
""", mpm="prefork", files={"init.rb": INIT, "check.rb": CHECK,
                           "show.rb": SHOW})
    answers = a.get_spread("/counted", count=16, concurrency=4)
    assert all(r.status_code == 200 for r in answers), a.error_log()[-2000:]
    parent = a.master_pid()
    children = set()
    for r in answers:
        greeting, started_in, child = r.text.rsplit(" ", 2)
        assert (greeting, int(started_in)) == \
            ("defined in post_config", parent)
        children.add(int(child))
    assert parent not in children
    # one Cache and one Mutex for every child: each request counted once
    assert sorted(int(r.headers["X-Hits"]) for r in answers) == \
        list(range(1, 17))
    # the script ran in the parent only
    assert a.error_log().count("post_config ran in") == 1


# Which interpreter a request ran in: child_init runs once in each.
NAME_INTERP = r'''
$interp = "#{Apache::Scoreboard.new.pid}-#{rand(1 << 30)}"
'''

# The first request holds its interpreter (a sleep outside a content
# handler blocks its thread) until a second one is in, 5 s at most: two
# requests at once, so the child has made a second interpreter.
HOLD = r'''
c = Userdata.new.shared_cache
Userdata.new.shared_mutex.synchronize { c["inside"] = (c["inside"].to_i + 1).to_s }
t = Time.now + 5
Apache.sleep 0.02 until c["inside"].to_i >= 2 || Time.now > t
Apache::Request.new.headers_out["X-Interp"] = $interp
''' + CHECK

SHOW_INTERP = r'''
Apache.rputs "#{greet} #{$started_in} #{$interp}"
'''


@pytest.mark.parametrize("mpm", ["event", "worker"])
def test_threaded_interpreters_have_what_post_config_defined(apache, mpm):
    """A threaded child runs scripts in several interpreters, made as it
    needs them; a fork copies only one.  Each interpreter runs the
    post_config scripts when it is made, before the child_init ones: the
    class, constant, method and global are in every one, and the Cache and
    global Mutex they keep in Userdata are the same for all (every request
    counted once).  The scripts ran in the parent too, and run again in
    each interpreter."""
    a = apache("""
mrubyPostConfigMiddle {dir}/init.rb
mrubyChildInitMiddle {dir}/name.rb
<Location /counted>
    mrubyAccessCheckerMiddle {dir}/check.rb
    mrubyHandlerMiddle {dir}/show.rb
</Location>
""", mpm=mpm, mpm_conf="StartServers 1\nServerLimit 1\nThreadsPerChild 8\n"
                      "ThreadLimit 8\nMinSpareThreads 1\nMaxSpareThreads 8\n"
                      "MaxRequestWorkers 8\nMaxConnectionsPerChild 0\n",
         files={"init.rb": INIT, "check.rb": HOLD, "show.rb": SHOW_INTERP,
                "name.rb": NAME_INTERP})
    answers = a.get_spread("/counted", count=16, concurrency=8)
    assert all(r.status_code == 200 for r in answers), \
        [l for l in a.error_log().splitlines() if "[mruby" in l][-10:]
    interps = set()
    for r in answers:
        greeting, started_in, interp = r.text.rsplit(" ", 2)
        assert greeting == "defined in post_config"
        # the scripts ran again in the child, which $started_in says
        assert started_in == interp.split("-")[0]
        assert int(started_in) != a.master_pid()
        # a request's phases may run in different interpreters: the
        # access checker's is the one that held on
        interps.update((interp, r.headers["X-Interp"]))
    # one child, several interpreters in it
    assert len({i.split("-")[0] for i in interps}) == 1
    assert len(interps) > 1
    assert sorted(int(r.headers["X-Hits"]) for r in answers) == \
        list(range(1, 17))
    assert "NameError" not in a.error_log()
