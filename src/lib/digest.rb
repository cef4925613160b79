# The Ruby parts of Digest (src/lib/mrb_digest.c computes).

module Digest
  class Base
    def self.hexdigest(data)
      digest(data).unpack1("H*")
    end

    def self.base64digest(data)
      [digest(data)].pack("m0")
    end

    def hexdigest
      digest.unpack1("H*")
    end

    def base64digest
      [digest].pack("m0")
    end

    def to_s
      hexdigest
    end

    def ==(other)
      other.is_a?(String) ? hexdigest == other : digest == other.digest
    end

    def inspect
      "#<#{self.class}: #{hexdigest}>"
    end
  end

  # Digest::HMAC.new(key, Digest::SHA256) fed with update/<<, or one shot:
  # Digest::HMAC.hexdigest(data, key, Digest::SHA256)
  class HMAC
    def self.digest(data, key, algorithm)
      __digest(data.to_s, key.to_s, algorithm)
    end

    def self.hexdigest(data, key, algorithm)
      digest(data, key, algorithm).unpack1("H*")
    end

    def self.base64digest(data, key, algorithm)
      [digest(data, key, algorithm)].pack("m0")
    end

    def initialize(key, algorithm)
      @key = key.to_s
      @algorithm = algorithm
      @data = ""
    end

    def update(data)
      @data << data.to_s
      self
    end
    alias << update

    def reset
      @data = ""
      self
    end

    def digest
      HMAC.__digest(@data, @key, @algorithm)
    end

    def hexdigest
      digest.unpack1("H*")
    end

    def base64digest
      [digest].pack("m0")
    end

    alias to_s hexdigest
  end
end
