"""Rules that hold on both servers next to their own features (issue 17):
one script, Apache and nginx."""

import pytest

# A handler that writes, then declines: it has answered all the same.
WRITE_THEN_DECLINE = '''
Server = get_server_class
Server.rputs "a"
Server.return Server::DECLINED
'''


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_apache_handler_that_wrote_has_answered(apache, mpm):
    a = apache("""
<Location /h/>
    mrubyHandlerMiddle {dir}/decline.rb
</Location>
<Location /acc/>
    mrubyAccessCheckerMiddleCode 'Apache.rputs "from access"'
</Location>
""", mpm=mpm, files={"decline.rb": WRITE_THEN_DECLINE},
        docs={"h/static.html": "static-file\n", "acc/page.html": "page\n"})
    r = a.get("/h/static.html")
    assert (r.status_code, r.text) == (200, "a")
    a.wait_log("decline.rb wrote output and returned DECLINED: "
               "the output is the response")
    # an earlier phase's output is the response too, not a prefix of it
    r = a.get("/acc/page.html")
    assert (r.status_code, r.text) == (200, "from access")


def test_nginx_content_script_that_wrote_has_answered(nginx):
    n = nginx("location /h/ { mruby_content_handler {dir}/decline.rb; }\n"
              "location /acc/ { mruby_access_handler_code "
              "'Nginx.rputs \"from access\"'; }\n",
              files={"decline.rb": WRITE_THEN_DECLINE},
              docs={"h/static.html": "static-file\n", "acc/page.html": "page\n"})
    r = n.get("/h/static.html")
    assert (r.status_code, r.text) == (200, "a")
    n.wait_log("the script wrote output and returned DECLINED: "
               "the output is the response")
    r = n.get("/acc/page.html")
    assert (r.status_code, r.text) == (200, "from access")


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
