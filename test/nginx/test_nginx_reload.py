"""ngx_mruby across nginx -s reload: new configuration and scripts take
effect, old workers go, and nothing leaks in the master."""

import os
import signal
import socket
import time

import harness


CONF = """
mruby_init_code 'Nginx.errlogger Nginx::LOG_NOTICE, "init VERSION"';
mruby_init_worker {dir}/worker.rb cache;
mruby_shared_dict reloads 1m;
server {
    listen 127.0.0.1:{port};
    location /file { mruby_content_handler {dir}/content.rb cache; }
    location /inline { mruby_content_handler_code 'Nginx.rputs "inline VERSION"'; }
    location /set { mruby_set_code $v '"set VERSION"'; return 200 $v; }
    location /dict { mruby_content_handler_code 'd = Nginx::SharedDict.new("reloads"); Nginx.rputs d.incr("n", 1, init: 0).to_s'; }
}
"""


def write_version(n, v):
    n.conf = CONF.replace("VERSION", v)
    n.write("worker.rb", "$worker = '%s'" % v)
    n.write("content.rb", "Nginx.rputs 'file %s ' + $worker" % v)


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_reload_applies_new_config_and_scripts(nginx):
    n = nginx(start=False)
    write_version(n, "v1")
    n.start()
    assert n.get("/file").text == "file v1 v1"
    assert n.get("/inline").text == "inline v1"
    assert n.get("/set").text == "set v1"
    assert n.get("/dict").text == "1"
    old = set(n.worker_pids())

    write_version(n, "v2")
    n.reload()
    assert not (set(n.worker_pids()) & old)
    assert n.get("/file").text == "file v2 v2"
    assert n.get("/inline").text == "inline v2"
    assert n.get("/set").text == "set v2"
    # the dictionary, same name and size, kept its contents
    assert n.get("/dict").text == "2"
    n.wait_log("init v2")


def test_reload_with_a_broken_script_keeps_the_old_configuration(nginx):
    n = nginx(start=False)
    write_version(n, "v1")
    n.start()
    pids = n.worker_pids()
    n.write("content.rb", "def broken(\n")
    os.kill(n.master_pid(), 1)  # SIGHUP: the new configuration fails
    n.wait_log("content.rb:")
    assert n.get("/file").text == "file v1 v1"
    assert n.worker_pids() == pids


def test_reloads_do_not_leak(nginx):
    n = nginx(start=False)
    write_version(n, "v0")
    n.start()
    master = n.master_pid()

    for i in range(5):  # let the allocator settle
        write_version(n, "w%d" % i)
        n.reload()
    rss0, fds0 = harness.rss_kb(master), fd_count(master)

    for i in range(20):
        write_version(n, "r%d" % i)
        n.reload()
        assert n.get("/file").text == "file r%d r%d" % (i, i)

    rss1, fds1 = harness.rss_kb(master), fd_count(master)
    assert fds1 == fds0
    # 20 reloads each compile the scripts and run mruby_init in a fresh
    # interpreter (~125 kB): a leak of either would show as > 2 MB.
    # (AddressSanitizer keeps freed memory in quarantine: RSS says nothing.)
    if not harness.ASAN:
        assert rss1 - rss0 < 1024, (rss0, rss1)
    assert len(n.worker_pids()) == 1


DICT_CONF = """
mruby_shared_dict kept SIZE;
server {
    listen 127.0.0.1:{port};
    EXTRA
    location /set { mruby_content_handler_code 'Nginx::SharedDict.new("kept")["k"] = "stored"; Nginx.rputs "ok"'; }
    location /get { mruby_content_handler_code 'Nginx.rputs Nginx::SharedDict.new("kept")["k"].inspect'; }
}
"""


def test_refused_reload_keeps_the_shared_dictionaries(nginx):
    """A reload that resizes the dictionary and then fails (its listen
    address is in use) leaves the master on the old configuration: a
    worker forked after it reads what was stored before."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    n = nginx(start=False)
    n.conf = DICT_CONF.replace("SIZE", "1m").replace("EXTRA", "")
    n.start()
    assert n.get("/set").text == "ok"
    old = n.worker_pids()

    n.conf = DICT_CONF.replace("SIZE", "2m").replace(
        "EXTRA", "listen 127.0.0.1:%d;" % busy.getsockname()[1])
    n.generate()
    os.kill(n.master_pid(), signal.SIGHUP)
    n.wait_log("Address already in use")
    assert n.worker_pids() == old
    assert n.get("/get").text == '"stored"'

    # a worker forked now, from the master's old configuration
    os.kill(old[0], signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline and (not n.worker_pids()
                                      or n.worker_pids() == old):
        time.sleep(0.05)
    assert n.worker_pids() and n.worker_pids() != old
    assert n.get("/get").text == '"stored"'
    busy.close()
