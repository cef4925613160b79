r = Apache::Request.new
r.content_type = "text/plain"

Apache.rputs "Hello from test.rb\n"
Apache.rputs "uri: #{r.uri}\n"
