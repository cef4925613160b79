# Cache (matsumotory/mruby-localmemcache's API): a String store in a file
# mapped by every process that opens it, so every worker shares it.  Any
# process makes it on demand, at any phase: Cache.new(namespace: "name")
# is the file name.cache in the server's Cache directory (mrubyCacheDir /
# mruby_cache_dir), Cache.new(filename: "/path") the file at that path.
# size_mb sizes a store when it is made (default 1); an existing store
# keeps its size.  The store is a shared dictionary's zone, with its lock,
# its recovery from a killed holder and its LRU eviction when full
# (src/core/mrb_shdict_file.c).

class Cache
  class CacheError < StandardError; end
  class InitError < CacheError; end
  class MemoryPoolFull < CacheError; end
  class MemoryPoolClosed < CacheError; end

  MB = 1024 * 1024

  def self.__store(opts)
    raise ArgumentError, "Cache.new takes a Hash of options" unless opts.is_a?(Hash)
    size = opts[:size_mb]
    size = size.nil? || size == 0 ? MB : (size.to_f * MB).to_i
    server = get_server_class::SharedDict
    begin
      if opts[:filename]
        server.__file(opts[:filename].to_s, true, size)
      elsif opts[:namespace]
        server.__file(opts[:namespace].to_s, false, size)
      else
        raise ArgumentError, "Cache.new needs :namespace or :filename"
      end
    rescue server::Error => e
      raise InitError, e.message
    end
  end

  # Empties the store (the original also removed its file; here processes
  # that have it open keep using it, so it stays).
  def self.drop(opts = {})
    new(opts).clear
    nil
  end

  def initialize(opts = {})
    @dict = Cache.__store(opts)
  end

  def __dict
    raise MemoryPoolClosed, "Pool is closed" unless @dict
    @dict
  end

  def get(key)
    __dict[key.to_s]
  end
  alias [] get

  def set(key, value)
    __dict[key.to_s] = value.to_s
    value
  rescue get_server_class::SharedDict::FullError => e
    raise MemoryPoolFull, e.message
  end
  alias []= set

  def delete(key)
    __dict.delete(key.to_s)
  end

  def clear
    __dict.flush_all
    nil
  end

  def keys
    __dict.keys
  end

  def size
    __dict.size
  end

  def each_pair
    keys.each do |k|
      v = get(k)
      yield k, v unless v.nil?
    end
    self
  end

  def to_h
    h = {}
    each_pair { |k, v| h[k] = v }
    h
  end

  def shm_status
    total, free = __dict.__usage
    { :total_bytes => total, :used_bytes => total - free,
      :free_bytes => free }
  end

  def close
    __dict
    @dict = nil
  end
end
