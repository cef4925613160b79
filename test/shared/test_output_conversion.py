"""rputs, echo, errlogger and log take any object and write its to_s, as
the original mod_mruby and ngx_mruby did (ported scripts write Integers
and nil), on both servers with one script."""

import pytest

SCRIPT = '''
Server = get_server_class
Server.rputs 42
Server.rputs nil
Server.rputs :sym
Server.echo 1.5
Server.errlogger Server::LOG_ERR, 12345
Server.log Server::LOG_ERR, [:logged, 2]
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_any_object_is_written_as_its_to_s(kind, apache, nginx):
    if kind == "apache":
        s = apache("<Location /c>\n    mrubyHandlerMiddle {dir}/c.rb\n"
                   "</Location>", files={"c.rb": SCRIPT})
    else:
        s = nginx("location /c { mruby_content_handler {dir}/c.rb; }",
                  files={"c.rb": SCRIPT})
    r = s.get("/c")
    assert (r.status_code, r.text) == (200, "42sym1.5\n")
    s.wait_log("12345")
    s.wait_log("[:logged, 2]")
