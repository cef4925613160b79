"""What a request leaves on a Redis object that the requests of a worker
share (a constant a startup script made) is not the next request's: the
replies queued commands got and did not take, and commands queued and
never committed, are dropped when the request ends, on nginx and on
Apache's event and prefork MPMs; while a request waits on nginx, another
cannot take its replies."""

import concurrent.futures
import time

import pytest

import harness

# /leave: queues two commands, takes the first reply and leaves the
# second (a value of this request's) on the object; /queue: queues a
# command and ends without committing it.
LEAVE = r'''
R.queue(:set, "secret", "left by an earlier request")
R.queue(:get, "secret")
get_server_class.rputs R.reply.inspect
'''

QUEUE = r'''
R.queue(:set, "queued", "by an earlier request")
get_server_class.rputs "queued"
'''

# /own: the replies of this request's own command; /plain: a command.
OWN = r'''
R.queue(:get, "mine")
get_server_class.rputs R.bulk_reply.inspect
'''

PLAIN = r'''
get_server_class.rputs R.get("queued").inspect
'''

# /hold: takes the first of its two replies, then sleeps until /go; /held
# says whether it got that far.
HOLD = r'''
d = get_server_class::SharedDict.new("gate")
R.queue(:set, "a", "the holder's value")
R.queue(:get, "a")
first = R.reply
d["held"] = "1"
t = Time.now + 30
sleep 0.05 until d["go"] || Time.now > t
get_server_class.rputs [first, R.reply].inspect
'''

HELD = r'''
get_server_class.rputs get_server_class::SharedDict.new("gate")["held"].to_s
'''

GO = r'''
get_server_class::SharedDict.new("gate")["go"] = "1"
get_server_class.rputs "go"
'''

# /other: another request's reply while /hold's wait on the object
OTHER = r'''
begin
  R.queue(:get, "b")
  get_server_class.rputs R.bulk_reply.inspect
rescue RuntimeError => e
  get_server_class.rputs e.message
end
'''


def shared_object_server(kind, apache, nginx, redis_server, routes, files):
    """One interpreter, whose startup script made R, a Redis object its
    requests share; a shared dictionary "gate"."""
    init = f'R = Redis.new("127.0.0.1", {redis_server.port})'
    main = (f"mruby_init_worker_code '{init}';\nmruby_shared_dict gate 1m;\n"
            if kind == "nginx"
            else f"mrubyChildInitMiddleCode '{init}'\nmrubySharedDict gate 1m\n")
    return harness.one_interpreter(kind, apache, nginx, routes, files,
                                   nginx_main=main, apache_main=main)


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
def test_a_request_sees_no_earlier_requests_replies_or_queue(
        kind, apache, nginx, redis_server):
    """(The next request's bulk_reply used to answer the earlier one's
    value before its own, and a command queued and never committed made
    the next request's commands raise 'commands are queued'.)"""
    s = shared_object_server(
        kind, apache, nginx, redis_server,
        {"/leave": "leave.rb", "/queue": "queue.rb", "/own": "own.rb",
         "/plain": "plain.rb"},
        {"leave.rb": LEAVE, "queue.rb": QUEUE, "own.rb": OWN,
         "plain.rb": PLAIN})
    assert s.get("/leave").text == ":OK"
    r = s.get("/own")
    assert (r.status_code, r.text) == (200, "[nil]"), s.error_log()[-2000:]
    assert s.get("/queue").text == "queued"
    r = s.get("/plain")
    assert (r.status_code, r.text) == (200, "nil"), s.error_log()[-2000:]
    r = s.get("/own")
    assert (r.status_code, r.text) == (200, "[nil]"), s.error_log()[-2000:]
    # the queued SET was dropped, never sent
    assert redis_server.command("EXISTS", "queued") == ":0"


def test_a_waiting_requests_replies_are_its_own(apache, nginx, redis_server):
    """While /hold sleeps with a reply not taken yet, another request on
    its interpreter (nginx's worker runs others while one waits) cannot
    take it, and /hold finds it when it wakes.  (The other request's
    bulk_reply used to answer /hold's value.)"""
    s = shared_object_server(
        "nginx", apache, nginx, redis_server,
        {"/hold": "hold.rb", "/held": "held.rb", "/go": "go.rb",
         "/other": "other.rb", "/own": "own.rb"},
        {"hold.rb": HOLD, "held.rb": HELD, "go.rb": GO, "other.rb": OTHER,
         "own.rb": OWN})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(s.get, "/hold", timeout=60)
        deadline = time.monotonic() + 30
        while s.get("/held").text != "1":
            assert time.monotonic() < deadline, "/hold never held"
            time.sleep(0.05)
        r = s.get("/other")
        assert (r.status_code, r.text) == \
            (200, "Redis: another request's replies wait on this object "
                  "(make a Redis object in each request: Redis.new reuses "
                  "the connection)")
        assert s.get("/go").text == "go"
        r = held.result(60)
        assert (r.status_code, r.text) == \
            (200, '[:OK, "the holder\'s value"]'), s.error_log()[-2000:]
    r = s.get("/own")
    assert (r.status_code, r.text) == (200, "[nil]"), s.error_log()[-2000:]


# /replace?<port>: leaves something for the end of the run to drop (a
# queued command; MULTI), then reassigns the constant Redis.
REPLACE = r'''
port = get_server_class::Request.new.args.to_i
Redis.new("127.0.0.1", port).queue(:set, "replaced", "1")
Redis.new("127.0.0.1", port).multi
Redis = 5
get_server_class.rputs "replaced"
'''


@pytest.mark.parametrize("kind", ["nginx", "apache-event"])
def test_a_run_that_reassigns_redis_ends_cleanly(kind, apache, nginx,
                                                 redis_server):
    """The end of the run finds the Redis class it keeps, not the constant
    the script reassigned: the worker serves on and Redis is the class
    again.  (The run's end looked the constant up and raised outside any
    rescue: the worker aborted, signal 6.)"""
    s = harness.one_interpreter(
        kind, apache, nginx, {"/replace": "replace.rb", "/plain": "plain.rb"},
        {"replace.rb": REPLACE, "plain.rb": "get_server_class.rputs "
         "Redis.new('127.0.0.1', get_server_class::Request.new.args.to_i)"
         ".get('replaced').inspect"})
    pids = s.worker_pids()
    r = s.get(f"/replace?{redis_server.port}")
    assert (r.status_code, r.text) == (200, "replaced"), s.error_log()[-2000:]
    r = s.get(f"/plain?{redis_server.port}")
    assert (r.status_code, r.text) == (200, "nil"), s.error_log()[-2000:]
    assert s.worker_pids() == pids
