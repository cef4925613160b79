# translate_name: send /reverse_proxy/app/<path> to a backend.
r = Apache::Request.new
c = Apache::Connection.new

# The backends: here, two locations of this same server.
BACKENDS = [
  "http://127.0.0.1:#{c.local_port}/reverse_proxy/backend1",
  "http://127.0.0.1:#{c.local_port}/reverse_proxy/backend2",
]

# The same client always goes to the same backend.
backend = BACKENDS[c.remote_ip.bytes.inject(0) { |sum, b| sum + b } % BACKENDS.size]

path = r.uri["/reverse_proxy/app".size..-1]
path = "/" if path.empty?
# the client's query string goes along (a "?query" in the URL replaces it)
r.reverse_proxy backend + path
Apache.return Apache::OK
