# Access phase: redirect by conditions.  Server-neutral: Apache or nginx.
Server = get_server_class
r = Server::Request.new

uri = r.uri
ua = r.headers_in["User-Agent"].to_s
args = r.args.to_s
target = nil
code = Server::HTTP_MOVED_TEMPORARILY

if uri.start_with?("/redirect/old/")
  # moved for good: keep the rest of the path
  target = "/redirect/new/" + uri["/redirect/old/".size..-1]
  code = Server::HTTP_MOVED_PERMANENTLY
elsif uri == "/redirect/" && ua.include?("Mobile")
  target = "/redirect/mobile/"
elsif uri == "/redirect/" && args.split("&").include?("lang=ja")
  target = "/redirect/new/ja.html"
end

if target
  r.headers_out["Location"] = target
  Server.return code
end
