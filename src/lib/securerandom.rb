# The Ruby parts of SecureRandom (random_bytes and random_number are in
# mrb_securerandom.c).

module SecureRandom
  ALPHANUMERIC = [*"A".."Z", *"a".."z", *"0".."9"]

  def self.hex(n = nil)
    random_bytes(n).unpack1("H*")
  end

  def self.base64(n = nil)
    [random_bytes(n)].pack("m0")
  end

  def self.urlsafe_base64(n = nil, padding = false)
    s = base64(n).tr("+/", "-_")
    s = s.delete("=") unless padding
    s
  end

  def self.uuid
    b = random_bytes(16).bytes
    b[6] = (b[6] & 0x0f) | 0x40
    b[8] = (b[8] & 0x3f) | 0x80
    h = b.pack("C*").unpack1("H*")
    "#{h[0, 8]}-#{h[8, 4]}-#{h[12, 4]}-#{h[16, 4]}-#{h[20, 12]}"
  end

  def self.rand(n = 0)
    random_number(n)
  end

  def self.alphanumeric(n = nil)
    n ||= 16
    (0...n).map { ALPHANUMERIC[random_number(ALPHANUMERIC.size)] }.join
  end
end
