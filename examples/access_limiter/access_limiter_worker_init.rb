# access_limiter_worker_init.rb: in every worker before its first request
# (Apache child_init, nginx mruby_init_worker).  What it defines stays for
# the worker's life; the request scripts only call it.
#
# Counting (access_limiter.rb, access_limiter_end.rb).  The number of
# requests running for a file (r.filename) lives in the shared dictionary
# "access_limiter", as a *held* count: hold adds one on behalf of this
# worker process, release takes it back.  A worker killed in the middle of
# requests (SIGKILL, a crash) cannot release, so the dictionary withdraws
# what a dead process held, at most a second after it died, while the counts
# of requests still running elsewhere stay.
#
# Fleet mode (redis = "host:port", a Redis Cluster's nodes, or sentinels, in
# access_limiter.rb): the count lives in Redis, shared by every server that
# uses it, as a sorted set per file with one entry per running request: its
# name, scored with the end of its lease.  The count in drops the entries
# whose lease ended, adds the request's and answers how many there are; the
# count out removes the request's entry.  So a request that no server counts
# out (its server was killed, the count out was lost to a timeout or a
# failover) stops counting `lease` seconds after it was counted in, and
# nothing else is touched.  One script per count, one round trip.
Server = get_server_class

module AccessLimiter
  # Made once per worker, used by every request: a handle to the request
  # being served (it keeps no request of its own, so one does for all), the
  # dictionary and the server class, all under one constant: a request
  # script pays for each constant it looks up.
  COUNTS    = Server::SharedDict.new("access_limiter")
  HANDLES   = [Server::Request.new, COUNTS, Server].freeze

  FLEET     = "\0fleet\0"   # this process took a fleet count for a file
  REDIS_AT  = "\0redis"     # where the fleet counts are, for the log phase
  CLUSTER   = "cluster "    # REDIS_AT's start for a cluster's nodes
  SENTINEL  = "sentinel "   # ... for the name sentinels watch and them
  NOTE      = "access_limiter"  # Apache: the request's note of its name

  # Who runs a request, in its entry's name: the host and the nginx master
  # or Apache parent process, which every worker of a server shares.
  SELF      = "#{Uname.nodename}/#{Process.ppid}/"

  # The count in.  KEYS[1]: the file's entries; ARGV: the request's entry,
  # the lease in ms.  The set expires with its last lease (servers with
  # different leases included), so a file nobody counts any more leaves
  # nothing behind.
  IN        = <<~LUA
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
    local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
    redis.call('PEXPIREAT', KEYS[1], last)
    return redis.call('ZCARD', KEYS[1])
  LUA
  # What the next count in would add one to: the entries whose lease has
  # not ended.  Writes nothing.
  SUM       = <<~LUA
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  LUA

  # A file's key: the hash tag keeps it in one slot of a cluster.
  def self.key(file)
    "access_limiter:{#{file}}"
  end

  # The name of the request being served, the same in its access and log
  # phases (make: true in the access phase).  nginx has one for every
  # request ($request_id: 32 random hex digits), kept for the request when
  # the configuration names it (nginx-http.conf), else made anew at each
  # read: the first count in of a worker checks.  Under Apache the access
  # phase makes one, as random, and keeps it in the request's notes.
  if Server.to_s == "Nginx"
    def self.entry(r, make)
      id = r.var.request_id
      if make && !@request_id_kept
        unless r.var.request_id == id
          raise "access_limiter: fleet mode needs nginx to keep " \
                "$request_id for the request: add `map $request_id " \
                "$access_limiter_request_id { default $request_id; }` to " \
                "the http block (see nginx-http.conf)"
        end
        @request_id_kept = true
      end
      SELF + id
    end
  else
    def self.entry(r, make)
      return SELF + r.notes[NOTE].to_s unless make
      id = SecureRandom.hex(16)
      r.notes[NOTE] = id
      SELF + id
    end
  end

  # addr: "host:port", CLUSTER and the nodes' "host:port"s joined by
  # commas, or SENTINEL, the name the sentinels watch, a space and theirs.
  # One connection per worker interpreter and server, kept across requests.
  def self.redis(addr)
    if addr.start_with?(CLUSTER)
      Redis::Cluster.new(addr[CLUSTER.size..-1].split(","), timeout: 0.5)
    elsif addr.start_with?(SENTINEL)
      name, sentinels = addr[SENTINEL.size..-1].split(" ")
      Redis.new(sentinels: sentinels.split(","), name: name, timeout: 0.5)
    else
      host, port = addr.split(":")
      Redis.new(host, port.to_i, timeout: 0.5)
    end
  end

  # The setting `redis` of access_limiter.rb as REDIS_AT keeps it (see
  # redis).
  def self.address(redis)
    case redis
    when Array then CLUSTER + redis.join(",")
    when Hash
      SENTINEL + "#{redis[:name]} #{redis[:sentinels].join(",")}"
    else redis
    end
  end

  # Fleet mode, access phase: the request's entry into Redis; the answer
  # is the fleet's count.  This process notes its share of fleet counts in
  # the dictionary under FLEET + file, not under file, which is how the log
  # phase tells a fleet count from a local one.
  def self.fleet_in(r, file, redis, lease, fail_open)
    if @redis != redis
      @redis = redis
      @redis_at = address(redis)
      COUNTS[REDIS_AT] = @redis_at
    end
    addr = @redis_at
    count = redis(addr).call("EVAL", IN, 1, key(file), entry(r, true),
                             (lease * 1000).to_i)
    COUNTS.hold(FLEET + file)
    count
  rescue Redis::BaseError => e
    Server.errlogger Server::LOG_ERR, "access_limiter: redis #{addr} " \
                     "unavailable (#{e.class}: #{e.message}): failing " \
                     "#{fail_open ? 'open' : 'closed'} for #{file}"
    Server.return Server::HTTP_SERVICE_UNAVAILABLE unless fail_open
    nil
  end

  # Fleet mode, log phase, for a request that held no local count: takes
  # its entry out of Redis, if this process took a fleet count for the
  # file.
  def self.fleet_out(r, file)
    return unless COUNTS.release(FLEET + file) && (addr = COUNTS[REDIS_AT])
    redis(addr).call("ZREM", key(file), entry(r, false))
  rescue Redis::BaseError => e
    Server.errlogger Server::LOG_ERR, "access_limiter: redis #{addr} " \
                     "unavailable (#{e.class}: #{e.message}): the count of " \
                     "#{file} ends with its lease"
  end

  # The fleet's count of a file now, for a status page: what the next
  # request's count in adds one to.  nil before this server's first fleet
  # count (it does not know where the counts are yet).
  def self.fleet_count(file)
    addr = COUNTS[REDIS_AT]
    addr && redis(addr).call("EVAL", SUM, 1, key(file))
  end
end
