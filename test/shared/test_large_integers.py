"""Integers of 2**62 and more given to the standard library, which mruby
3.1.0's VM compares wrongly with < and >: the request gets an answer and
the worker serves the next one, on nginx and Apache's event and prefork
MPMs."""

import pytest

import harness

# SecureRandom.random_number's bound and a StringIO position, both from
# the query string ("4611686018427387904" is 2**62).
LARGE = r'''
Server = get_server_class
n = Server::Request.new.args.to_i
out = []
x = SecureRandom.random_number(n)
out << (x.is_a?(Integer) && (x <=> 0) >= 0 && (x <=> n) < 0)
io = StringIO.new("abc")
begin
  io.pos = n
  out << io.read.inspect
rescue ArgumentError => e
  out << e.message
end
Server.rputs out.join(" ")
'''


def server(kind, apache, nginx):
    return harness.one_interpreter(
        kind, apache, nginx, {"/large": "large.rb", "/ping": "ping.rb"},
        {"large.rb": LARGE,
         "ping.rb": 'get_server_class.rputs "pong"\n'})


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
def test_random_number_and_stringio_position_of_2_62_and_more(
        kind, apache, nginx):
    """random_number(n) for n of 2**62 and more answers a number below n
    (it used to loop for ever: the worker spun at 100% CPU and ignored
    SIGTERM), and a StringIO position that large is refused (it used to be
    taken as below the String's size)."""
    s = server(kind, apache, nginx)
    pids = s.worker_pids()
    for n in (2**62, 2**62 + 1, 2**63 - 1, 6):
        r = s.get(f"/large?{n}")
        assert r.status_code == 200, s.error_log()[-2000:]
        want = '""' if n == 6 else f"invalid position: {n}"
        assert r.text == f"true {want}"
        assert s.get("/ping").text == "pong"
    assert s.worker_pids() == pids
