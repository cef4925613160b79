# nginx's access phase checks HTTP Basic credentials itself: nginx has no
# authentication providers (Apache uses its own, see check_password.rb).
Server = get_server_class
r = Server::Request.new

USERS = {
  "alice" => "wonderland",
  "bob"   => "builder",
}

auth = r.headers_in["Authorization"].to_s
user, password = nil, nil

if auth.start_with?("Basic ")
  user, password = auth[6..-1].unpack("m").first.to_s.split(":", 2)
end

if user.nil? || USERS[user] != password
  r.headers_out["WWW-Authenticate"] = 'Basic realm="ngx_mruby example"'
  Server.return Server::HTTP_UNAUTHORIZED
end
