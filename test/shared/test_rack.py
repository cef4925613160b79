"""Kernel#run and Kernel::Rack as the originals' rack-based-api has them,
one script on both servers: the environment build_env makes, the status as
the phase's answer (an access-phase app that answers 403 denies, DECLINED
passes), headers as a Hash or an Array of pairs, rack.logger, rack.input
read lazily with read/gets/each, and TypeError for a malformed response."""

import re

import pytest

# GET /env?x=1: the env keys the originals provide
ENV_APP = r'''
class Env
  def call(env)
    keys = %w(REQUEST_METHOD SCRIPT_NAME PATH_INFO REQUEST_URI QUERY_STRING
              SERVER_ADDR REMOTE_ADDR rack.url_scheme rack.hijack? server.name
              server.version rack.multithread)
    out = keys.map { |k| "#{k}=#{env[k]}" }
    out << "ports=#{env["SERVER_PORT"].to_i > 0} #{env["REMOTE_PORT"].to_i > 0}"
    env["rack.logger"].warn "logged by rack.logger"
    env["rack.logger"].info { "logged from a block" }
    [200, [["Content-Type", "text/plain"], ["X-Pairs", "yes"]], [out.join("\n")]]
  end
end
run Env.new
'''

# access phase: 403 without a body denies, DECLINED lets the request on
GATE_APP = r'''
class Gate
  def call(env)
    if env["QUERY_STRING"] == "deny"
      [403, {}, []]
    else
      [get_server_class::DECLINED, {}, []]
    end
  end
end
run Gate.new
'''

# rack.input: gets/each/read(n) over the body
INPUT_APP = r'''
class Lines
  def call(env)
    io = env["rack.input"]
    first = io.gets
    rest = []
    io.each { |l| rest << l.chomp }
    io.rewind
    [200, {}, ["#{first.inspect} #{rest.inspect} #{io.read(3).inspect} " \
               "#{io.read.inspect} #{io.read(1).inspect}"]]
  end
end
run Lines.new
'''

BAD_APP = r'''
class Bad
  def call(env)
    [200, "Content-Type: text/plain", ["x"]]
  end
end
run Bad.new
'''


def serve(kind, apache, nginx, mpm="event"):
    if kind == "apache":
        return apache("""
<Location /env>
    mrubyHandlerMiddle {dir}/env.rb
</Location>
<Location /gate>
    mrubyAccessCheckerMiddle {dir}/gate.rb
</Location>
<Location /input>
    mrubyHandlerMiddle {dir}/input.rb
</Location>
<Location /bad>
    mrubyHandlerMiddle {dir}/bad.rb
</Location>
<Location /version>
    mrubyHandlerMiddleCode 'Apache.rputs Apache.server_version'
</Location>
""", files={"env.rb": ENV_APP, "gate.rb": GATE_APP, "input.rb": INPUT_APP,
            "bad.rb": BAD_APP}, docs={"gate": "the page"}, mpm=mpm)
    return nginx("""
location /env { mruby_content_handler {dir}/env.rb; }
location /gate { mruby_access_handler {dir}/gate.rb; }
location /input { mruby_enable_read_request_body on;
                  mruby_content_handler {dir}/input.rb; }
location /bad { mruby_content_handler {dir}/bad.rb; }
location /version {
    mruby_content_handler_code 'Nginx.rputs Nginx.server_version';
}
""", files={"env.rb": ENV_APP, "gate.rb": GATE_APP, "input.rb": INPUT_APP,
            "bad.rb": BAD_APP}, docs={"gate": "the page"})


# server.name and server.version name the server, not the module, as in
# the originals (whose suites compare server.version with what
# Server.server_version answers); rack.multithread is false everywhere, as
# the originals' suites expect: an application object is in one
# interpreter, which runs one script at a time, also on a threaded MPM.
@pytest.mark.parametrize("kind,mpm,name,threaded", [
    ("apache", "event", "Apache", "false"),
    ("apache", "prefork", "Apache", "false"),
    ("nginx", None, "NGINX", "false")])
def test_rack_env_headers_and_logger(kind, mpm, name, threaded, apache,
                                     nginx):
    s = serve(kind, apache, nginx, mpm=mpm)
    version = s.get("/version").text
    assert re.fullmatch(r"Apache/2\.4\.\d+ .*" if kind == "apache"
                        else r"1\.\d+\.\d+", version), version
    r = s.get("/env?x=1")
    assert r.status_code == 200
    assert r.text.split("\n") == [
        "REQUEST_METHOD=GET", "SCRIPT_NAME=", "PATH_INFO=/env",
        "REQUEST_URI=/env?x=1", "QUERY_STRING=x=1",
        "SERVER_ADDR=127.0.0.1", "REMOTE_ADDR=127.0.0.1",
        "rack.url_scheme=http", "rack.hijack?=false",
        f"server.name={name}", f"server.version={version}",
        f"rack.multithread={threaded}", "ports=true true"]
    assert r.headers["Content-Type"].startswith("text/plain")
    assert r.headers["X-Pairs"] == "yes"
    s.wait_log("logged by rack.logger")
    s.wait_log("logged from a block")


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_rack_status_is_the_phase_answer(kind, apache, nginx):
    s = serve(kind, apache, nginx)
    assert s.get("/gate?deny").status_code == 403
    r = s.get("/gate?pass")
    assert (r.status_code, r.text) == (200, "the page")


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_rack_input_lines(kind, apache, nginx):
    s = serve(kind, apache, nginx)
    r = s.post("/input", data="one\ntwo\nthree")
    assert r.text == '"one\\n" ["two", "three"] "one" "\\ntwo\\nthree" nil'


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_rack_malformed_headers_raise_type_error(kind, apache, nginx):
    s = serve(kind, apache, nginx)
    assert s.get("/bad").status_code == 500
    s.wait_log("TypeError: Rack headers must be a Hash or an Array of "
               "pairs, not String")


# rack.input: empty without a body; on nginx, a body that was not read
# explains itself
RACK_ECHO = '''
class Echo
  def call(env)
    [200, {"Content-Type" => "text/plain"},
     ["#{env["REQUEST_METHOD"]} [#{env["rack.input"].read}]"]]
  end
end
run Echo.new
'''


def test_rack_input_apache(apache):
    a = apache("<Location /app>\n  mrubyHandlerMiddle {dir}/app.rb\n"
               "</Location>\n", files={"app.rb": RACK_ECHO})
    assert a.get("/app").text == "GET []"
    assert a.post("/app", data="x=1").text == "POST [x=1]"


def test_rack_input_nginx(nginx):
    n = nginx("location /app { mruby_content_handler {dir}/app.rb; }\n"
              "location /read { mruby_enable_read_request_body on;\n"
              "                 mruby_content_handler {dir}/app.rb; }\n",
              files={"app.rb": RACK_ECHO})
    r = n.get("/app")
    assert (r.status_code, r.text) == (200, "GET []")
    assert n.post("/read", data="x=1").text == "POST [x=1]"
    r = n.post("/app", data="x=1")
    assert r.status_code == 500
    n.wait_log('RuntimeError: the request has a body, which nginx reads '
               'only for locations with "mruby_enable_read_request_body on"')
