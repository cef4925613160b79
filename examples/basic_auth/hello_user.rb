r = Apache::Request.new
r.content_type = "text/plain"
Apache.rputs "Hello #{r.user}\n"
