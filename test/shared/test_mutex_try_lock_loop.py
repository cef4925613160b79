"""Mutex#try_lock_loop as mruby-mutex had it, which the published access
limiter and DoS detector count under: try_lock_loop(retry_us = 100000,
timeout_us = 5000000) { ... } tries the lock every retry_us microseconds,
runs the block with the lock held (self the Mutex; the block unlocks) and
answers false; a global lock still held by another after timeout_us is
taken from it, and true answered.  And a limiter in the manner of the
published one (limiter_scripts.py), its Cache opened once in post_config:
it limits under event as under prefork."""

import concurrent.futures
import os
import time

import pytest

import limiter_scripts

# The block runs with the lock held and self the Mutex; the answer is
# false when nobody had to be robbed of the lock.
BLOCK = r'''
Server = get_server_class
m = Mutex.new(global: true, key: "block")
seen = nil
broke = m.try_lock_loop(50000) do
  begin
    seen = "#{self.class} #{m.locked?} #{m.owned?}"
  ensure
    m.unlock
  end
end
Server.rputs "#{seen} #{broke.inspect} #{m.locked?}"
'''

# A lock held by this live process but by no run of it (as one a hung run
# holds): taken after the timeout (0.2 s, tried every 20 ms).
STUCK = r'''
Server = get_server_class
Server::SharedDict.new("mruby_mutex")["stuck"] = Process.pid
m = Mutex.new(global: true, key: "stuck")
ran = false
broke = m.try_lock_loop(20_000, 200_000) { ran = true; m.unlock }
Server.rputs "#{ran} #{broke.inspect} #{m.locked?}"
'''

STARTUP = "Mutex.new(global: true)\n"


def serve(kind, apache, nginx, routes, main_apache="", main_nginx=""):
    files = {f"h{i}.rb": code for i, code in enumerate(routes.values())}
    files["startup.rb"] = STARTUP
    if kind == "nginx":
        locs = "".join(f"location {path} {{ mruby_content_handler "
                       f"{{dir}}/h{i}.rb; }}\n"
                       for i, path in enumerate(routes))
        return nginx(main_nginx + "server {\n listen 127.0.0.1:{port};\n"
                     + locs + "}\n", workers=2, files=files)
    locs = "".join(f"<Location {path}>\n    mrubyHandlerMiddle {{dir}}/h{i}.rb"
                   f"\n</Location>\n" for i, path in enumerate(routes))
    return apache(main_apache + locs, mpm=kind.split("-")[1], files=files)


# A lock the parent or master holds, a live process of another user (root;
# the workers run as www-data or nobody): not taken over as a dead
# holder's, but after the timeout.
PARENT = STUCK.replace('["stuck"] = Process.pid', '["parent"] = Process.ppid') \
              .replace('key: "stuck"', 'key: "parent"')


@pytest.mark.parametrize("kind", ["apache-event", "apache-prefork", "nginx"])
def test_try_lock_loop_runs_its_block_with_the_lock(kind, apache, nginx):
    s = serve(kind, apache, nginx, {"/block": BLOCK, "/stuck": STUCK,
                                    "/parent": PARENT},
              main_apache="mrubyPostConfigMiddle {dir}/startup.rb\n",
              main_nginx="mruby_init {dir}/startup.rb;\n")
    assert s.get("/block").text == "Mutex true true false false"
    assert s.get("/stuck").text == "true true false"
    assert s.get("/parent").text == "true true false"


# the slow page: waits for the test's gate, 30 s at most
SLOW = r'''
gate = Apache::Server.new.document_root + "/gate"
t = Time.now + 30
Apache.sleep 0.02 until File.exist?(gate) || Time.now > t
Apache.rputs "loaded"
'''


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_limiter_counts_under_try_lock_loop(apache, mpm):
    """Threshold 2, eight requests at once to the slow page: two load, six
    get 503 (each logged), and the count is back to nothing once they are
    done."""
    a = apache("""
mrubyPostConfigMiddle {dir}/init.rb cache
<FilesMatch ^.*\\.php$>
    mrubyAccessCheckerMiddle {dir}/check.rb cache
    mrubyLogTransactionMiddle {dir}/end.rb cache
    mrubyHandlerMiddle {dir}/slow.rb
</FilesMatch>
<Location /count>
    mrubyHandlerMiddle {dir}/count.rb
</Location>
""", mpm=mpm, files={
        "init.rb": limiter_scripts.POST_CONFIG
        + limiter_scripts.OPEN_IN_POST_CONFIG,
        "check.rb": limiter_scripts.ACCESS, "end.rb": limiter_scripts.LOG,
        "slow.rb": SLOW, "count.rb": limiter_scripts.COUNT},
        docs={"sleep.php": "<?php sleep(3); ?>"})
    page = os.path.join(a.docroot, "sleep.php")

    def one(_):
        return a.get("/sleep.php", headers={"Connection": "close"})

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        futures = [ex.submit(one, i) for i in range(8)]
        deadline = time.monotonic() + 30
        while sum(f.done() for f in futures) < 6:
            assert time.monotonic() < deadline, a.error_log()[-3000:]
            time.sleep(0.02)
        a.write_doc("gate", "")
        statuses = sorted(f.result().status_code for f in futures)
    assert statuses == [200] * 2 + [503] * 6, a.error_log()[-3000:]
    log = a.error_log()
    assert log.count(f"in_flight: {page} over 2, answered 503") == 6
    assert "taken over" not in log
    deadline = time.monotonic() + 5
    while a.get("/count?" + page).text != "nil":
        assert time.monotonic() < deadline, "the count did not go back"
        time.sleep(0.05)
