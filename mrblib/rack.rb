# Kernel#run: a Rack-style application as the handler of a request, on
# Apache or nginx alike.  The app's call(env) returns [status, headers,
# body]; the status, the headers and each piece of the body become the
# response.
#
#   class Hello
#     def call(env)
#       [200, {"Content-Type" => "text/plain"}, ["Hello #{env["PATH_INFO"]}"]]
#     end
#   end
#   run Hello.new

# The request body, read only when the application asks for it (nginx
# needs "mruby_enable_read_request_body on" for it).
class RackInput
  def initialize(request)
    @request = request
    @body = nil
  end

  def read(*)
    @body ||= @request.body.to_s
  end

  def each
    yield read
  end

  def rewind
    0
  end
end

module Kernel
  def run(app)
    server = get_server_class
    r = server::Request.new
    c = server::Connection.new

    env = {
      "REQUEST_METHOD" => r.method,
      "SCRIPT_NAME" => "",
      "PATH_INFO" => r.uri,
      "QUERY_STRING" => r.args.to_s,
      "SERVER_NAME" => r.hostname.to_s,
      "SERVER_PORT" => c.local_port.to_s,
      "SERVER_PROTOCOL" => r.protocol,
      "SERVER_SOFTWARE" => server.module_name,
      "REMOTE_ADDR" => c.remote_ip,
      "rack.version" => [1, 3],
      "rack.url_scheme" => r.scheme.to_s,
      "rack.input" => RackInput.new(r),
      "rack.multithread" => false,
      "rack.multiprocess" => true,
      "rack.run_once" => false,
    }

    r.headers_in.all.each do |name, value|
      key = name.upcase.tr("-", "_")
      if key == "CONTENT_TYPE" || key == "CONTENT_LENGTH"
        env[key] = value
      else
        env["HTTP_" + key] = value
      end
    end

    status, headers, body = app.call(env)

    r.status = status.to_i
    headers.each do |name, value|
      if name.downcase == "content-type"
        r.content_type = value.to_s
      else
        # Rack joins the values of a repeated header (Set-Cookie, Link,
        # Vary) with newlines: each is one header line of its own
        r.headers_out.delete(name)
        value.to_s.split("\n").each { |v| r.headers_out.add(name, v) }
      end
    end

    body.each { |chunk| server.rputs chunk.to_s }
    body.close if body.respond_to?(:close)

    server.return server::OK
  end
end
