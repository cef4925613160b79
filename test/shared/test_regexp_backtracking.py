"""A pattern that backtracks without end on request data: the search stops
at Oniguruma's retry limits with a RegexpError naming the limit, the
request gets its answer and the worker serves the next one
(docs/security.md).  Before the limits, /(a+)+$/ on this 1.4 KB query
held the worker 7 to 30 s and then answered nil."""

import pytest

from test_stack_limits import PID, PROBE, one_worker

SCRIPT = """\
Server = get_server_class
pid = {pid}
q = Server::Request.new.args
begin
  Server.rputs "#{{pid}} #{{(q =~ /(a+)+$/).inspect}}"
rescue RegexpError => e
  Server.rputs "#{{pid}} #{{e.class}}: #{{e.message}}"
end
""".format(pid=PID)


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
def test_runaway_backtracking_stops_at_the_retry_limit(kind, apache, nginx):
    s = one_worker(kind, apache, nginx, {"/probe": PROBE, "/match": SCRIPT})
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    pid = first.text.split(" ")[0]

    r = s.get("/match?" + ("a" * 23 + "!") * 60)
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == (f"{pid} RegexpError: backtracking limit hit: more than "
                      "1000000 retries at one position "
                      "(retry_limit_in_match): /(a+)+$/")
    assert s.get("/probe").text == f"{pid} alive"

    # what backtracks little still matches
    assert s.get("/match?" + "a" * 1000).text == f"{pid} 0"
