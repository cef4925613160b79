# Kernel#run: a Rack-style application as a phase of a request, on Apache
# or nginx alike, with the helpers of the originals' rack-based-api
# (Kernel::Rack.build_env, build_response, Logger, LazyStringIO).  The
# app's call(env) returns [status, headers, body]; the headers and each
# piece of the body become the response, and the status the phase's
# answer (so a 403 from an access-phase app denies).
#
#   class Hello
#     def call(env)
#       [200, {"Content-Type" => "text/plain"}, ["Hello #{env["PATH_INFO"]}"]]
#     end
#   end
#   run Hello.new

module Kernel
  module Rack
    Server = get_server_class

    # rack.logger: each level's method writes msg (or the block's value)
    # at the server's level of the same name.
    class Logger
      LEVELS = {
        emerg: :LOG_EMERG, alert: :LOG_ALERT, crit: :LOG_CRIT,
        fatal: :LOG_CRIT, error: :LOG_ERR, warn: :LOG_WARN,
        notice: :LOG_NOTICE, info: :LOG_INFO, debug: :LOG_DEBUG,
      }

      LEVELS.each_key do |name|
        define_method(name) { |msg = nil, &block| add(name, msg, &block) }
      end

      private

      def add(severity, msg = nil)
        msg = yield if msg.nil? && block_given?
        Server.errlogger Server.const_get(LEVELS[severity]), msg.to_s
      end
    end

    # rack.input: the request body, read from the server only when the
    # application first asks for it (nginx needs
    # "mruby_enable_read_request_body on" to have one).
    class LazyStringIO
      def initialize(body_proc)
        @body_proc = body_proc
        @body = nil
        @pos = 0
      end

      def read(length = nil, buffer = nil)
        data = body
        if length.nil?
          chunk = data[@pos, data.size - @pos] || ""
        elsif @pos >= data.size
          return length == 0 ? "" : nil
        else
          chunk = data[@pos, length]
        end
        @pos += chunk.size
        buffer ? buffer.replace(chunk) : chunk
      end

      def gets
        data = body
        return nil if @pos >= data.size
        stop = data.index("\n", @pos)
        line = stop ? data[@pos..stop] : data[@pos, data.size - @pos]
        @pos += line.size
        line
      end

      def each
        while (line = gets)
          yield line
        end
        self
      end

      def rewind
        @pos = 0
      end

      def size
        body.size
      end

      private

      def body
        @body ||= @body_proc.call.to_s
      end
    end

    def self.build_env(r, c)
      env = {
        "REQUEST_METHOD" => r.method,
        "SCRIPT_NAME" => "",
        "PATH_INFO" => r.uri,
        "REQUEST_URI" => r.unparsed_uri,
        "QUERY_STRING" => r.args.to_s,
        "SERVER_NAME" => r.hostname.to_s,
        "SERVER_ADDR" => c.local_ip,
        "SERVER_PORT" => c.local_port.to_s,
        "SERVER_PROTOCOL" => r.protocol,
        "SERVER_SOFTWARE" => Server.module_name,
        "REMOTE_ADDR" => c.remote_ip,
        "REMOTE_PORT" => c.remote_port.to_s,
        "rack.version" => [1, 3],
        "rack.url_scheme" => r.scheme.to_s,
        "rack.input" => LazyStringIO.new(proc { r.body }),
        "rack.errors" => nil,
        "rack.logger" => Logger.new,
        # an application object lives in one interpreter, which runs one
        # script at a time: no two threads call it at once on any MPM
        "rack.multithread" => false,
        "rack.multiprocess" => true,
        "rack.run_once" => false,
        "rack.hijack?" => false,
        "server.name" => server_name,
        "server.version" => Server.server_version,
      }

      r.headers_in.all.each do |name, value|
        key = name.upcase.tr("-", "_")
        if key == "CONTENT_TYPE" || key == "CONTENT_LENGTH"
          env[key] = value
        else
          env["HTTP_" + key] = value
        end
      end

      env
    end

    # Applies [status, headers, body] to the response: an HTTP status
    # (200-599) as the response status, each header (a Hash or an Array of
    # pairs; a value with newlines is one header line per line, as Rack
    # joins repeated headers), each piece of the body.  Returns whether
    # the body wrote anything.  A nil response is ignored.
    def self.build_response(r, res)
      return false if res.nil?
      status, headers, body = res

      # <=>, as mruby 3.1.0's VM compares an Integer of 2**62 or more
      # wrongly with >= and <= (and between?)
      if status.is_a?(Integer) && (status <=> 200) >= 0 && (status <=> 599) <= 0
        r.status = status
      end

      unless headers.nil?
        unless headers.is_a?(Hash) || headers.is_a?(Array)
          raise TypeError, "Rack headers must be a Hash or an Array of " \
                           "pairs, not #{headers.class}"
        end
        headers.each do |name, value|
          if name.to_s.downcase == "content-type"
            r.content_type = value.to_s
          else
            r.headers_out.delete(name)
            value.to_s.split("\n").each { |v| r.headers_out.add(name, v) }
          end
        end
      end

      wrote = false
      unless body.nil?
        unless body.respond_to?(:each)
          raise TypeError, "a Rack body must respond to each, " \
                           "not #{body.class}"
        end
        body.each do |chunk|
          chunk = chunk.to_s
          wrote ||= !chunk.empty?
          Server.rputs chunk
        end
        body.close if body.respond_to?(:close)
      end

      wrote
    end
  end

  # The app's status is the phase's answer: 200, or any status once the
  # body wrote something (the output is then the response), is OK; another
  # status (403, a redirect, Server::DECLINED) is returned as it is.
  def run(app)
    server = Rack::Server
    r = server::Request.new
    res = app.call(Rack.build_env(r, server::Connection.new))
    wrote = Rack.build_response(r, res)
    status = res.nil? ? nil : res[0]
    return if status.nil?

    server.return(wrote || status == 200 ? server::OK : status)
  end
end
