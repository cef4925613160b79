# Cache (matsumotory/mruby-localmemcache's API) on the server's SharedDict:
# a String store shared by every worker process.  Cache.new(namespace:
# "name") uses the dictionary "name" (filename: its base name): declare it
# with mrubySharedDict / mruby_shared_dict, or open it first in a
# post_config / mruby_init script, which makes it with the default size.
# size_mb is the declaration's business here and is ignored.

class Cache
  def self.__dict_name(opts)
    name = (opts[:namespace] || opts[:filename] || "cache").to_s
    name = name.split("/").last.to_s
    name = name.gsub(/[^A-Za-z0-9_.\-]/, "_")
    name.size > 63 ? name[-63, 63] : name
  end

  def self.drop(opts = {})
    new(opts).clear
    true
  end

  def initialize(opts = {})
    @dict = get_server_class::SharedDict.new(Cache.__dict_name(opts))
  end

  def get(key)
    v = @dict[key.to_s]
    v.nil? ? nil : v.to_s
  end
  alias [] get

  def set(key, value)
    @dict[key.to_s] = value.to_s
    value
  end
  alias []= set

  def delete(key)
    @dict.delete(key.to_s)
  end

  def clear
    @dict.flush_all
    nil
  end

  def keys
    @dict.keys
  end

  def size
    @dict.size
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
    { "namespace" => @dict.name, "size" => size }
  end

  def close
    nil
  end
end
