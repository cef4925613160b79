"""Server.log_level?(level): whether Server.errlogger(level, ...) would write
its line now, on both servers, following the level that applies to the
request (Apache's per-directory and per-module LogLevel, nginx's error_log
of the location)."""

# The answer for each level, as "debug=false info=true ..."
LEVELS = '''
Server = get_server_class
Server.rputs [[:debug, Server::LOG_DEBUG], [:info, Server::LOG_INFO],
              [:notice, Server::LOG_NOTICE], [:warn, Server::LOG_WARN],
              [:err, Server::LOG_ERR]].map { |name, level|
  "#{name}=#{Server.log_level?(level)}"
}.join(" ")
'''

# What each answer claims, checked against the log: a line per level
LOGGED = '''
Server = get_server_class
[[:debug, Server::LOG_DEBUG], [:info, Server::LOG_INFO],
 [:notice, Server::LOG_NOTICE], [:warn, Server::LOG_WARN]].each do |name, level|
  Server.errlogger level, "level #{name} #{Server.log_level?(level)}"
end
Server.rputs "done"
'''


def answers(text):
    return dict(pair.split("=") for pair in text.split())


def test_apache_follows_loglevel_of_the_request(apache):
    """LogLevel warn, with info in one location and mruby:debug in another;
    notice and above always pass, as Apache always logs them."""
    a = apache("""
<Location /warn>
    mrubyHandlerMiddle {dir}/levels.rb
</Location>
<Location /info>
    LogLevel info
    mrubyHandlerMiddle {dir}/levels.rb
</Location>
<Location /debug>
    LogLevel mruby:debug
    mrubyHandlerMiddle {dir}/levels.rb
</Location>
<Location /logged>
    mrubyHandlerMiddle {dir}/logged.rb
</Location>
""", files={"levels.rb": LEVELS, "logged.rb": LOGGED}, loglevel="warn")

    assert answers(a.get("/warn").text) == {
        "debug": "false", "info": "false", "notice": "true", "warn": "true",
        "err": "true"}
    assert answers(a.get("/info").text) == {
        "debug": "false", "info": "true", "notice": "true", "warn": "true",
        "err": "true"}
    assert answers(a.get("/debug").text)["debug"] == "true"

    assert a.get("/logged").text == "done"
    log = a.wait_log("level warn true")
    assert "level notice true" in log
    assert "level info" not in log and "level debug" not in log


def test_nginx_follows_error_log_of_the_location(nginx):
    """error_log warn, with info in one location."""
    n = nginx("""
location /warn { mruby_content_handler {dir}/levels.rb; }
location /info {
    error_log {dir}/logs/info.log info;
    mruby_content_handler {dir}/levels.rb;
}
location /logged { mruby_content_handler {dir}/logged.rb; }
""", files={"levels.rb": LEVELS, "logged.rb": LOGGED}, loglevel="warn")

    assert answers(n.get("/warn").text) == {
        "debug": "false", "info": "false", "notice": "false", "warn": "true",
        "err": "true"}
    assert answers(n.get("/info").text) == {
        "debug": "false", "info": "true", "notice": "true", "warn": "true",
        "err": "true"}

    assert n.get("/logged").text == "done"
    log = n.wait_log("level warn true")
    assert "level notice" not in log and "level info" not in log


def test_needs_one_argument(apache):
    a = apache("<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n</Location>",
               files={"t.rb": "begin; Apache.log_level?; rescue ArgumentError"
                              " => e; Apache.rputs e.message; end"})
    assert "wrong number of arguments" in a.get("/t").text
