# Redis behind Sentinel: where the master (or a replica) of a group that
# sentinels watch is.  Redis.new(sentinels: [...], name:, role:) is a
# ::Redis object (src/core/mrb_redis.c) whose connection goes to the
# address a Redis::Sentinel of this interpreter holds; when a command finds
# that server gone or no longer in its role, the C side asks __resolve for
# the address again and moves the object there.
#
# One Redis::Sentinel per sentinel list, name, role, users and TLS files
# in an interpreter, kept in the class (Sentinel.__group), out of reach of
# the cleanup that undoes a run's top-level changes: every later request
# uses the address it learned, with no round trip to a sentinel.  The
# sentinels are asked in order, each through a ::Redis object (so every
# wait is a ::Redis wait: on nginx, on the event loop); an answer counts
# once the server it names says, by ROLE, that it is what was asked for.
#
# Options (C's redis_sentinel_options, nil when none): the servers' user,
# password, ssl and TLS files, then the sentinels' user and password.  TLS
# goes to the sentinels and the servers alike, a user and password to
# either only as given for it, as redis-rb's sentinel_username: and
# sentinel_password: do.  A refused password is a Redis::AuthError at
# once, not a reason to ask the next sentinel.
class Redis
  class Sentinel
    ROLES = { master: "master", replica: "slave" }
    TLS_PARAMS = [:ca_file, :ca_path, :cert, :key]

    @groups = {}

    # The key is made of copies (a script that changes its Array or name
    # after Redis.new must not change a key in the Hash), and holds no
    # password: another password makes a new group.
    def self.__group(sentinels, name, role, options)
      key = [sentinels, name, role]
      key << options[0] << options[2, 6] if options
      group = @groups[key]
      return group if group && group.__options == options
      group = Sentinel.new(sentinels.dup, name, role, options)
      key[0] = sentinels.dup
      key[1] = name.dup
      @groups[key] = group
    end

    def self.__address?(s)
      return false unless s.is_a?(String)
      i = s.rindex(":")
      i && i > 0 && s[i + 1..-1].to_i.to_s == s[i + 1..-1]
    end

    def initialize(sentinels, name, role, options)
      unless sentinels.is_a?(Array) && !sentinels.empty? &&
             sentinels.all? { |s| Sentinel.__address?(s) }
        raise ArgumentError, "Redis.new: sentinels: is an Array of " \
                             "\"host:port\" Strings, not #{sentinels.inspect}"
      end
      unless name.is_a?(String) && !name.empty?
        raise ArgumentError, "Redis.new: sentinels: needs name: (the " \
                             "name the sentinels monitor), not #{name.inspect}"
      end
      unless ROLES.key?(role)
        raise ArgumentError, "Redis.new: role: is :master or :replica, not " \
                             "#{role.inspect}"
      end
      @sentinels = sentinels
      @name = name
      @role = role
      @address = nil
      # in a closure: inspect shows instance variables, and a password is
      # never to be shown
      @options = lambda { options }
      @server_options = lambda { __options_of(options, 0, 1) }
      @sentinel_options = lambda { __options_of(options, 7, 8) }
    end

    def __options
      @options.call
    end

    # Redis.new's keywords for a server (user and password at user,
    # password) or a sentinel; nil for none.
    def __options_of(options, user, password)
      return nil unless options
      o = {}
      o[:username] = options[user] if options[user]
      o[:password] = options[password] if options[password]
      return (o.empty? ? nil : o) unless options[2]
      params = {}
      TLS_PARAMS.each_with_index do |k, i|
        params[k] = options[3 + i] if options[3 + i]
      end
      o[:ssl] = true
      o[:ssl_params] = params
      o
    end

    # The address of the server in the role asked for: the one known,
    # unless it is stale (the address that just failed), else the first
    # a sentinel names and ROLE confirms.  Within timeout seconds in all.
    def __resolve(stale, timeout)
      return @address if @address && @address != stale
      deadline = Time.now.to_f + timeout
      failures = []
      unknown = 0
      @sentinels.each do |s|
        left = deadline - Time.now.to_f
        if left <= 0
          failures << "#{s}: not asked, the timeout passed"
          next
        end
        begin
          addr = __ask(s, left)
        rescue BaseError => e
          __refused!(e, s)
          failures << "#{s}: #{e.message}"
          next
        end
        if addr == :unknown
          unknown += 1
          next
        end
        if addr.nil?
          failures << "#{s}: no #{@role} of #{@name.inspect} is up"
          next
        end
        begin
          __check_role(addr, [deadline - Time.now.to_f, 0.001].max)
        rescue BaseError => e
          __refused!(e, addr)
          failures << "#{s} names #{addr}: #{e.message}"
          next
        end
        return @address = addr
      end
      if unknown == @sentinels.size
        raise ConnectionError, "Redis: no sentinel monitors a master " \
                               "named #{@name.inspect} (asked " \
                               "#{@sentinels.join(", ")})"
      end
      raise ConnectionError, "Redis: no #{@role} of #{@name.inspect} " \
                             "found (#{failures.join("; ")})"
    end

    # A password refused (AUTH's WRONGPASS), or one not given that the
    # server wants (NOAUTH): raised as Redis::AuthError.
    def __refused!(e, addr)
      raise e if e.is_a?(AuthError)
      return unless e.is_a?(ReplyError) && e.message.start_with?("NOAUTH ")
      raise AuthError, "#{addr}: #{e.message}"
    end

    def __node(addr, timeout, options)
      i = addr.rindex(":")
      return Redis.new(addr[0, i], addr[i + 1..-1].to_i, timeout: timeout) \
        unless options
      Redis.new(addr[0, i], addr[i + 1..-1].to_i, timeout: timeout,
                **options)
    end

    # "host:port" of the master, or of the first replica in good health;
    # nil when the sentinel knows none, :unknown when it monitors no
    # master of that name.
    def __ask(sentinel, timeout)
      r = __node(sentinel, timeout, @sentinel_options.call)
      if @role == :master
        hp = r.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", @name)
        return hp ? "#{hp[0]}:#{hp[1]}" : :unknown
      end
      begin
        replicas = r.call("SENTINEL", "REPLICAS", @name)
      rescue ReplyError => e
        return :unknown if e.message.include?("No such master")
        raise
      end
      replicas.each do |fields|
        field = ->(name) { i = fields.index(name); i && fields[i + 1] }
        flags = field["flags"].to_s.split(",")
        next if flags.include?("s_down") || flags.include?("o_down") ||
                flags.include?("disconnected")
        next unless field["master-link-status"] == "ok"
        return "#{field["ip"]}:#{field["port"]}"
      end
      nil
    end

    def __check_role(addr, timeout)
      role = __node(addr, timeout, @server_options.call).call("ROLE")[0]
      return if role == ROLES[@role]
      raise ConnectionError, "its ROLE is #{role}, not #{ROLES[@role]}"
    end
  end
end
