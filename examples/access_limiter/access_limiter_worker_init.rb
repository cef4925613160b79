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
# Fleet mode (redis = "host:port", or a Redis Cluster's nodes, in
# access_limiter.rb): the count lives in Redis, shared by every server that
# uses it: INCR on the way in, DECR on the way out, and each INCR renews the
# key's lease (EXPIRE, in the same script), so the counts of a server that
# died go away once its file has been quiet for `lease` seconds.  A file's
# key is access_limiter:{file}: the hash tag keeps everything of one file
# in one slot of a cluster.  Redis down: the request goes through (fail
# open) or gets 503 (fail closed), with an error log line either way.
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
  INCR      = "local n = redis.call('INCR', KEYS[1]) " \
              "redis.call('EXPIRE', KEYS[1], ARGV[1]) return n"
  DECR      = "local n = redis.call('DECR', KEYS[1]) " \
              "if n <= 0 then redis.call('DEL', KEYS[1]) end return n"

  def self.key(file)
    "access_limiter:{#{file}}"
  end

  # addr: "host:port", or CLUSTER and the nodes' "host:port"s joined by
  # commas.  One connection per worker interpreter and node, kept across
  # requests.
  def self.redis(addr)
    if addr.start_with?(CLUSTER)
      Redis::Cluster.new(addr[CLUSTER.size..-1].split(","), timeout: 0.5)
    else
      host, port = addr.split(":")
      Redis.new(host, port.to_i, timeout: 0.5)
    end
  end

  # Fleet mode, access phase: the count in Redis.  This process holds its
  # share under FLEET + file, not under file, which is how the log phase
  # tells a fleet count from a local one.
  def self.fleet_in(file, nodes, lease, fail_open)
    if @redis_nodes != nodes
      @redis_nodes = nodes
      @redis_at = nodes.is_a?(Array) ? CLUSTER + nodes.join(",") : nodes
      COUNTS[REDIS_AT] = @redis_at
    end
    addr = @redis_at
    count = redis(addr).call("EVAL", INCR, 1, key(file), lease)
    COUNTS.hold(FLEET + file)
    count
  rescue Redis::BaseError => e
    Server.errlogger Server::LOG_ERR, "access_limiter: redis #{addr} " \
                     "unavailable (#{e.class}: #{e.message}): failing " \
                     "#{fail_open ? 'open' : 'closed'} for #{file}"
    Server.return Server::HTTP_SERVICE_UNAVAILABLE unless fail_open
    nil
  end

  # Fleet mode, log phase, for a request that held no local count: gives
  # back its fleet count, if it took one.
  def self.fleet_out(file)
    return unless COUNTS.release(FLEET + file)
    addr = COUNTS[REDIS_AT]
    redis(addr).call("EVAL", DECR, 1, key(file))
  rescue Redis::BaseError => e
    Server.errlogger Server::LOG_ERR, "access_limiter: redis #{addr} " \
                     "unavailable (#{e.class}: #{e.message}): the count of " \
                     "#{file} is left to its lease"
  end
end
