# The greeting of hello_user.rb, server-neutral.
Server = get_server_class
r = Server::Request.new
r.content_type = "text/plain"
Server.rputs "Hello #{r.user}\n"
