"""String interpolation in a script, which the compiler builds in one
allocation (src/core/mrb_irep_dstr.c): the same body on both servers, on
every request, from values of every kind, and a new String each time."""

import pytest

import harness

SCRIPT = r'''
Server = get_server_class
h = Server::Request.new.headers_in
agent = h["User-Agent"]
n = 41 + 1
o = Object.new
def o.to_s; "obj"; end
s = :sym
x = nil
body = "agent=#{agent} n=#{n} o=#{o} s=#{s} x=#{x}."
body << "\n"
Server.rputs body
'''


@pytest.mark.parametrize("kind", ["apache-event", "nginx"])
def test_interpolation_of_every_kind_of_value(kind, apache, nginx):
    s = harness.one_interpreter(kind, apache, nginx, {"/i": "i.rb"},
                                {"i.rb": SCRIPT})
    for agent in ("first", "second"):
        r = s.get("/i", headers={"User-Agent": agent})
        assert (r.status_code, r.text) == (
            200, f"agent={agent} n=42 o=obj s=sym x=.\n"), s.error_log()
