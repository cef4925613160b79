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
