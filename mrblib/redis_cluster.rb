# Redis::Cluster: the Redis API over a Redis Cluster.  Each command goes
# to the master of its keys' slot (a read, with replica: true, to a
# replica of it) through that node's ::Redis object, so it waits as
# ::Redis does and uses the interpreter's connection to the node.  In the
# steady state that is C (src/core/mrb_redis_cluster.c: Redis::Cluster.new,
# call and the commands' methods); this is the rest: the first map,
# redirections, retries and failures.
#
# The slot map is the process's (src/core/mrb_redis_slots.c), shared by
# its interpreters: read with CLUSTER SLOTS by the first command of the
# process (one run reads it, the others that need it meanwhile wait for
# it), and changed by any of them for all.  Each interpreter keeps its
# SlotMap object in the class (@maps), out of reach of the cleanup that
# undoes a run's top-level changes, with its own ::Redis object of each
# node.  A MOVED reply changes the map's entry for its slot, once, and the
# command goes to the named node; ASK sends ASKING and the command to the
# named node, the map unchanged; TRYAGAIN and CLUSTERDOWN are retried,
# with growing pauses, until the command's timeout.  A node whose command
# failed to connect or timed out is suspect: a command for its slots
# reads the map first, asking its replicas before the other nodes (a
# promoted replica is the first to know), and never from a suspect before
# the others, so that a frozen node delays only the commands of its own
# slots.  A replica that failed a read is not read from for a second;
# its reads go to the master.
class Redis
  class Cluster
    class_eval(&CONVERTING_METHODS)

    REDIRECTS_MAX = 5
    REDIRECTIONS = %w(MOVED ASK TRYAGAIN CLUSTERDOWN)
    # error replies by which a replica says another node is to answer
    REPLICA_REFUSALS = REDIRECTIONS + %w(LOADING MASTERDOWN)
    RETRY_PAUSE = 0.01     # s, doubled at each TRYAGAIN or CLUSTERDOWN
    DEFAULT_TIMEOUT = 1.0  # s, as ::Redis's
    REPLICA_RETRY = 1.0    # s a replica that failed a read is left alone
    FIRST_MAP_PAUSE = 0.002  # s between looks at a map another run reads

    # Redis::Cluster.new(["127.0.0.1:7000", ...], timeout: 1.0) finds its
    # map here, by the nodes and the timeout (C: redis_cluster_initialize).
    @maps = {}

    # The map of the nodes and timeout named key (made in C) with
    # ::Redis.new's username:, password:, ssl: and ssl_params: for every
    # node, reading from replicas or not: made once per seed list,
    # timeout, user, TLS or not, TLS files and replica (the seeds checked
    # then), and again for another password.  Its key is an inspected
    # Array, so that no value passes for another (a user named like TLS
    # files); one without options is C's key alone.  Without any of them,
    # C looks the map up itself and makes it by __map_new.  The process's
    # map (the slots' nodes, mrb_redis_slots.c) is one per seed list,
    # user, TLS or not and TLS files: the timeout and the replicas' use
    # are the interpreter's.
    def self.__map_for(key, seeds, timeout, username, password, ssl,
                       ssl_params, replica = false)
      ssl = ssl ? true : false
      options = { username: username, password: password, ssl: ssl,
                  ssl_params: ssl_params }
      key = [key, username, ssl, ssl_params, replica ? true : false].inspect
      map = @maps[key]
      if map.nil? || map.__options != options
        name = username || ssl || ssl_params \
               ? [seeds, username, ssl, ssl_params].inspect
               : seeds.join(",")
        map = @maps[key] = SlotMap.new(name, seeds.dup, timeout, options,
                                       replica)
      end
      map
    end

    def self.__map_new(seeds, timeout)
      SlotMap.new(seeds.join(","), seeds.dup, timeout, nil, false)
    end

    def [](key)
      get(key)
    end

    def []=(key, value)
      set(key, value)
      value
    end

    # call and the commands' methods are C's; a command they do not send
    # themselves comes here.
    def __route(args)
      if @noted
        @noted << args
        return nil
      end
      map = @map
      raise ClosedError, "connection is already closed" if map.nil?
      map.__call(Cluster.__command_slot(args), args)
    end

    # This object's commands raise Redis::ClosedError from now on; the
    # connections stay, for the interpreter's next Redis::Cluster.
    def close
      @map = nil
    end

    def connected?
      !@map.nil?
    end

    # c.pipelined { |p| p.incr("{u1}n"); p.get("k") } => [1, "v"]: the
    # block's commands, one queue and commit per node, the replies in the
    # block's order.  As in Redis#pipelined, an error reply raises after
    # every reply was read.  The block gets a Redis::Cluster without a map
    # that notes each command (__route) and answers nil.
    def pipelined
      map = @map
      raise ClosedError, "connection is already closed" if map.nil?
      commands = []
      yield Cluster.allocate.__noting(commands)
      map.__pipeline(commands)
    end

    def __noting(commands)
      @noted = commands
      self
    end

    %w(queue commit reply bulk_reply).each do |name|
      define_method(name) do |*|
        raise ClusterError, "Redis::Cluster: #{name} is not supported on a " \
                            "cluster (pipelined is)"
      end
    end

    # An interpreter's view of the process's slot map (whose methods
    # __hold, __master, __replica, __load, __move ... are C's): the
    # options of its nodes, a ::Redis object for each node it spoke to,
    # and which nodes failed lately.
    class SlotMap
      def self.__address?(s)
        i = s.rindex(":")
        i && i > 0 && s[i + 1..-1].to_i.to_s == s[i + 1..-1]
      end

      def initialize(name, seeds, timeout, options, replica)
        unless seeds.all? { |s| SlotMap.__address?(s) }
          raise ArgumentError, "Redis::Cluster.new: the nodes are an " \
                               "Array of \"host:port\" Strings, not " \
                               "#{seeds.inspect}"
        end
        if !timeout.nil? && !(timeout.is_a?(Numeric) && timeout > 0)
          raise ArgumentError, "timeout must be between 0 and 3600 seconds"
        end
        __hold(name, replica)
        @seeds = seeds
        @timeout = timeout
        # in a closure: inspect shows instance variables, and a password
        # is never to be shown
        @options = lambda { options }
        @timeout_s = (timeout || DEFAULT_TIMEOUT).to_f
        @replica = replica
        @nodes = {}      # "host:port" => Redis
        @node_objs = []  # the same by the map's node numbers, for C
        @suspects = nil  # "host:port" => true: its last command failed;
                         # nil when none (C's path needs nil)
        @replicas_down = nil  # replica "host:port" => when (Time.now.to_f)
                              # it may be read from again; nil when none
      end

      def __options
        @options.call
      end

      def __redis(addr)
        i = addr.rindex(":")
        options = @options.call
        options = (options || {}).merge(readonly: true) if @replica
        if options
          Redis.new(addr[0, i], addr[i + 1..-1].to_i, timeout: @timeout,
                    **options)
        else
          Redis.new(addr[0, i], addr[i + 1..-1].to_i, timeout: @timeout)
        end
      end

      # The "host:port" of slot's master (slot 0's for a command without
      # a key, or the first node given when no node serves it), nil when
      # no node serves slot; the map read first if nobody read it yet.
      def __owner(slot)
        __first_map unless __loaded?
        __master(slot || 0) || (slot.nil? ? @seeds[0] : nil)
      end

      # The process's first map: read by the first run that needs it (in
      # any interpreter) while the others that need it meanwhile wait for
      # it, each at most its timeout; then, if it is not there, read here.
      def __first_map
        deadline = Time.now.to_f + @timeout_s
        until __loaded?
          if __claim(@timeout_s)
            begin
              return __load_slots
            ensure
              __unclaim
            end
          end
          break if Time.now.to_f >= deadline
          sleep FIRST_MAP_PAUSE
        end
        __load_slots unless __loaded?
      end

      def __call(slot, args)
        addr = __owner(slot)
        if addr.nil?
          raise ClusterError, "Redis::Cluster: no node serves slot #{slot}"
        end
        if @replica && slot && Cluster.__read_only?(args[0])
          replica = __replica(slot)
          return __read_replica(slot, replica, args) \
            if replica && __replica_readable?(replica)
        end
        __call_master(slot, addr, args)
      end

      def __call_master(slot, addr, args)
        return __send_suspect(slot, addr, args) if @suspects && @suspects[addr]
        begin
          __node(addr).call(*args)
        rescue ReplyError => e
          __redirected(slot, args, e)
        rescue ConnectionError => e
          __failed(slot, addr, args, e)
        end
      end

      # The command of args after its first try on addr, in C, raised e
      # (replica: addr is slot's replica).
      def __recover(slot, args, e, addr, replica)
        return __replica_failed(slot, addr, args, e) if replica
        case e
        when ReplyError then __redirected(slot, args, e)
        when ConnectionError then __failed(slot, addr, args, e)
        else raise e
        end
      end

      # A read on slot's replica at addr.
      def __read_replica(slot, addr, args)
        begin
          reply = __node(addr).call(*args)
        rescue BaseError => e
          return __replica_failed(slot, addr, args, e)
        end
        @replicas_down = __without(@replicas_down, addr)
        reply
      end

      # The read of args on slot's replica at addr raised e: when the
      # replica is down (it is then left alone for REPLICA_RETRY) or says
      # another node is to answer, the read goes to the master; a timeout
      # (the command's time is spent) and another error are raised.
      def __replica_failed(slot, addr, args, e)
        case e
        when TimeoutError
          (@replicas_down ||= {})[addr] = Time.now.to_f + REPLICA_RETRY
          raise e
        when ConnectionError
          (@replicas_down ||= {})[addr] = Time.now.to_f + REPLICA_RETRY
        when ReplyError
          raise e unless REPLICA_REFUSALS.include?(e.message.split(" ", 2)[0])
        else
          raise e
        end
        master = __owner(slot)
        if master.nil?
          raise ClusterError, "Redis::Cluster: no node serves slot #{slot}"
        end
        __call_master(slot, master, args)
      end

      def __replica_readable?(addr)
        @replicas_down.nil? || @replicas_down[addr].nil? ||
          Time.now.to_f >= @replicas_down[addr]
      end

      # addr's last command failed (e): it is suspect from now on.  When
      # nothing of the command reached addr (Redis::CannotConnectError:
      # the connect, the TLS handshake or AUTH failed) and the map, read
      # again, names another owner for the slot (a replica promoted), the
      # command goes there; else e is raised.
      def __failed(slot, addr, args, e)
        (@suspects ||= {})[addr] = true
        raise e unless e.is_a?(CannotConnectError)
        owner = __owner_after_reread(slot, addr)
        raise e if owner.nil? || owner == addr
        __send(slot, owner, args)
      end

      # A command for a suspect's slot reads the map first (the suspect's
      # replicas asked first: the first to know of a promotion), and goes
      # to the owner it names.
      def __send_suspect(slot, addr, args)
        __send(slot, __owner_after_reread(slot, addr) || addr, args)
      end

      # The command on addr, out of the steady state: an answer clears
      # addr's suspicion, a connection error sets it.
      def __send(slot, addr, args)
        begin
          reply = __node(addr).call(*args)
        rescue ReplyError => e
          return __redirected(slot, args, e)
        rescue ConnectionError => e
          (@suspects ||= {})[addr] = true
          raise e
        end
        __trust(addr)
        reply
      end

      def __trust(addr)
        @suspects = __without(@suspects, addr)
      end

      # h without addr; nil when that leaves it empty (C's path needs nil
      # for none)
      def __without(h, addr)
        return nil if h.nil?
        h.delete(addr)
        h.empty? ? nil : h
      end

      # The slot's master after reading the map again, nil if no node
      # answered within the timeout.
      def __owner_after_reread(slot, failed)
        __load_slots(failed, Time.now.to_f + @timeout_s)
        __master(slot || 0)
      rescue ConnectionError
        nil
      end

      # The interpreter's ::Redis object of the node at addr, made the
      # first time, and listed by the map's number of the node for C.
      def __node(addr)
        node = @nodes[addr] || (@nodes[addr] = __redis(addr))
        i = __index(addr)
        @node_objs[i] ||= node if i
        node
      end

      # The slots' nodes from the first node that answers CLUSTER SLOTS,
      # for the process: failed's replicas first, then the nodes given and
      # the nodes known, the suspects last; none after deadline
      # (Time.now.to_f).
      def __load_slots(failed = nil, deadline = nil)
        failures = []
        nodes = (failed ? __replicas_of(failed) : []) + @seeds +
                @nodes.keys + __addresses
        nodes = nodes.uniq
        if @suspects
          nodes = nodes.reject { |a| @suspects[a] } +
                  nodes.select { |a| @suspects[a] }
        end
        nodes.each do |addr|
          break if deadline && Time.now.to_f > deadline
          begin
            reply = __node(addr).call("CLUSTER", "SLOTS")
          rescue AuthError => e
            raise e
          rescue BaseError => e
            (@suspects ||= {})[addr] = true if e.is_a?(ConnectionError)
            failures << "#{addr}: #{e.message}"
            next
          end
          __trust(addr)
          return __slots_from(reply, addr)
        end
        raise ConnectionError, "Redis::Cluster: no node answered CLUSTER " \
                               "SLOTS (#{failures.join("; ")})"
      end

      # The reply of CLUSTER SLOTS from addr made the process's map.  A
      # node announced without a host (an empty String) is on the host
      # that answered.
      def __slots_from(reply, addr)
        ranges = []
        masters = {}
        reply.each do |range|
          nodes = range[2..-1].map do |node|
            host = node[0].to_s
            host = addr[0, addr.rindex(":")] if host.empty?
            "#{host}:#{node[1]}"
          end
          masters[nodes[0]] = true
          ranges << [range[0], range[1]] + nodes
        end
        __load(ranges)
        # a suspect that serves no slot now (a master failed over) is
        # asked for nothing more: forgotten
        @suspects.keys.each { |a| __trust(a) unless masters.key?(a) } \
          if @suspects
        nil
      end

      # Pipelined commands (Arrays of a name and arguments): those of
      # each node queued and committed together, node after node; a reply
      # that redirects (MOVED, ASK) or asks to retry (TRYAGAIN,
      # CLUSTERDOWN) has its command sent again alone.  All go to the
      # masters, replica: true or not.
      def __pipeline(commands)
        cmd_slots = []
        by_node = {}
        commands.each_with_index do |args, i|
          slot = Cluster.__command_slot(args)
          addr = __owner(slot)
          if addr.nil?
            raise ClusterError, "Redis::Cluster: no node serves slot #{slot}"
          end
          cmd_slots << slot
          (by_node[addr] ||= []) << i
        end
        replies = Array.new(commands.size)
        by_node.each do |addr, indexes|
          node = __node(addr)
          begin
            indexes.each { |i| node.queue(*commands[i]) }
            got = node.commit
          rescue ConnectionError => e
            (@suspects ||= {})[addr] = true
            raise e
          end
          indexes.each_with_index { |i, j| replies[i] = got[j] }
        end
        error = nil
        replies.each_with_index do |reply, i|
          next unless reply.is_a?(ReplyError)
          if REDIRECTIONS.include?(reply.message.split(" ", 2)[0])
            begin
              replies[i] = __redirected(cmd_slots[i], commands[i], reply)
              next
            rescue ReplyError => e
              replies[i] = reply = e
            end
          end
          error ||= reply
        end
        raise error if error
        replies
      end

      # The command after its first error reply e: redirected by MOVED or
      # ASK, retried after TRYAGAIN or CLUSTERDOWN, else e raised.  MOVED
      # changes the process's map when it names another master than the
      # map does.
      def __redirected(slot, args, e)
        redirects = 0
        pause = RETRY_PAUSE
        deadline = nil
        addr = nil
        asking = false
        while true
          words = e.message.split(" ")
          case words[0]
          when "MOVED", "ASK"
            redirects += 1
            if redirects > REDIRECTS_MAX
              raise ClusterError, "Redis::Cluster: #{args[0]}: more than " \
                                  "#{REDIRECTS_MAX} redirections (the last: " \
                                  "#{e.message})"
            end
            asking = words[0] == "ASK"
            addr = words[2]
            moved = words[1].to_i
            __move(moved, addr) if !asking && __master(moved) != addr
          when "TRYAGAIN", "CLUSTERDOWN"
            # the last pause is cut to the deadline, not skipped: a
            # slot's keys can stay split for most of the timeout
            deadline ||= Time.now.to_f + @timeout_s
            left = deadline - Time.now.to_f
            raise e if left <= 0
            sleep(pause < left ? pause : left)
            pause *= 2
            addr ||= __owner(slot) || @seeds[0]
          else
            raise e
          end
          begin
            return asking ? __ask(addr, args) : __node(addr).call(*args)
          rescue ReplyError => again
            e = again
          end
        end
      end

      # ASKING and the command on one link: a pipeline of an object of
      # this run's own (on the node's connection).
      def __ask(addr, args)
        r = __redis(addr)
        reply = r.pipelined { |p| p.asking; p.call(*args) }[1]
        return reply unless args[0].to_s.downcase == "hgetall"
        h = {}
        i = 0
        while i + 1 < reply.size
          h[reply[i]] = reply[i + 1]
          i += 2
        end
        h
      end
    end
  end
end
