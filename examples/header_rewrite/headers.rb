# Before the content: rewrite headers.  Server-neutral: Apache or nginx.
Server = get_server_class
r = Server::Request.new

# Once per client request: a subrequest (Apache looking up index.html for
# a directory, say) passes its headers on to the request that made it.
unless r.sub_request?
  # responses: security headers, and what kind of client asked
  r.headers_out["X-Frame-Options"] = "DENY"
  r.headers_out["X-Content-Type-Options"] = "nosniff"
  ua = r.headers_in["User-Agent"].to_s
  r.headers_out["X-Client-Kind"] = ua.include?("curl") ? "cli" : "other"

  # requests: the content never sees a client's X-Debug
  if r.headers_in["X-Debug"]
    r.headers_in.delete "X-Debug"
    r.headers_out["X-Debug-Removed"] = "1"
  end
end
