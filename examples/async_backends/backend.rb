# A slow backend: 100 ms per answer, spent without blocking the worker.
r = Nginx::Request.new
sleep 0.1
Nginx.rputs "#{r.uri.split('/').last}: #{r.args}"
