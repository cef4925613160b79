# Calls two backends one after the other, with a pause between them, and
# answers with both. While it waits the nginx worker serves other requests:
# 100 of these at once take about as long as one.
http = Nginx::Async::HTTP

users = http.sub_request("/async_backends/users", "id=7")
Nginx::Async.sleep 50
orders = http.sub_request("/async_backends/backend/orders", {"user" => 7})

if users.status != 200 || orders.status != 200
  Nginx.errlogger Nginx::LOG_WARN,
                  "async_backends: #{users.status} / #{orders.status}"
  Nginx.return Nginx::HTTP_BAD_GATEWAY
else
  Nginx.rputs "#{users.body}\n#{orders.body}\n"
end
