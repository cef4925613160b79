# Redis: the methods of mruby-redis (the client the original ngx_mruby
# builds in) whose reply it turns into something else than Redis's own,
# with its types, on top of the C client's call (src/core/mrb_redis.c;
# the commands that return their reply as it is are there).  Inside
# pipelined, where call queues and returns nil, each returns nil too.
# Redis::Cluster (mrblib/redis_cluster.rb) defines them too, over its own
# call: the block is run in each class.
class Redis
  CONVERTING_METHODS = proc do
    # EXISTS, HEXISTS, EXPIRE, HSET, HSETNX, SETNX: true or false
    {
      "exists?" => "EXISTS", "hexists?" => "HEXISTS", "expire" => "EXPIRE",
      "hset" => "HSET", "hsetnx" => "HSETNX", "setnx" => "SETNX",
    }.each do |name, command|
      define_method(name) do |*args|
        n = call(command, *args)
        n.nil? ? nil : n != 0
      end
    end

    # KEYS, HKEYS, HVALS, HGETALL, EXEC: nil rather than an empty Array or
    # Hash
    %w(keys hkeys hvals hgetall exec).each do |name|
      command = name.upcase
      define_method(name) do |*args|
        v = call(command, *args)
        v.nil? || v.empty? ? nil : v
      end
    end

    # MSET, HMSET: the object, so that calls chain
    %w(mset hmset).each do |name|
      command = name.upcase
      define_method(name) do |*args|
        call(command, *args)
        self
      end
    end

    # set(key, value, "EX" => seconds, "PX" => ms, "NX" => true,
    # "XX" => true): "OK", or nil when NX or XX kept it from being set.
    # The options are mruby-redis's: String keys only.
    def set(key, value, options = nil)
      args = [key, value]
      unless options.nil?
        opts = options.dup
        ex = opts.delete("EX")
        px = opts.delete("PX")
        nx = opts.delete("NX")
        xx = opts.delete("XX")
        raise ArgumentError, "Only one of EX or PX can be set" if ex && px
        raise ArgumentError, "Either NX or XX is true" if nx && xx
        unless opts.empty?
          raise ArgumentError, "unknown option(s) specified #{opts.keys} " \
                               "(only Strings are keys, not Symbols)"
        end
        args.push("EX", ex) if ex
        args.push("PX", px) if px
        args.push("NX") if nx
        args.push("XX") if xx
      end
      call("SET", *args)
    end

    # AUTH: a refused password raises Redis::AuthError (a ReplyError).
    def auth(*args)
      call("AUTH", *args)
    rescue ReplyError => e
      raise AuthError, e.message
    end

    # Every link has TCP keep-alive on (src/core/mrb_redis_conn.c), so
    # mruby-redis's switch finds it on.
    def enable_keepalive
      nil
    end

    def keepalive
      :on
    end
  end

  class_eval(&CONVERTING_METHODS)
end
