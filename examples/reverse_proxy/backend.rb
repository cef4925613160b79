# A stand-in backend: says who it is and what it was asked.
r = Apache::Request.new
r.content_type = "text/plain"

Apache.rputs "backend: #{r.uri.split("/")[2]}\n"
Apache.rputs "uri: #{r.uri}\n"
Apache.rputs "args: #{r.args}\n"
Apache.rputs "x-forwarded-for: #{r.headers_in["X-Forwarded-For"]}\n"
