"""A script that wrote output has answered, whatever it returns: a
handler that writes and then declines, and output written in an earlier
phase, are the response on both servers."""

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
