# Base64 as CRuby's base64 library, on mruby-pack's "m" directive.

module Base64
  STRICT = /\A(?:[A-Za-z0-9+\/]{4})*(?:[A-Za-z0-9+\/]{2}==|[A-Za-z0-9+\/]{3}=)?\z/

  def self.encode64(bin)
    [bin.to_s].pack("m")
  end

  def self.decode64(str)
    str.to_s.unpack1("m")
  end

  def self.strict_encode64(bin)
    [bin.to_s].pack("m0")
  end

  def self.strict_decode64(str)
    str = str.to_s
    raise ArgumentError, "invalid base64" unless STRICT.match?(str)
    str.unpack1("m")
  end

  def self.urlsafe_encode64(bin, padding: true)
    s = strict_encode64(bin).tr("+/", "-_")
    s = s.delete("=") unless padding
    s
  end

  def self.urlsafe_decode64(str)
    str = str.to_s
    if !str.end_with?("=") && str.size % 4 != 0
      str = str.ljust((str.size + 3) & ~3, "=")
    end
    strict_decode64(str.tr("-_", "+/"))
  end
end
