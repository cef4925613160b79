# StringIO (ksss/mruby-stringio's and CRuby's common methods): an IO over a
# String, for Rack's rack.input and for scripts that write to a buffer.

class StringIO
  include Enumerable

  attr_accessor :string, :lineno
  attr_reader :pos

  # The largest position (2**53 - 1).  The methods compare positions with
  # < and >, which mruby 3.1.0's VM gets wrong for an Integer of 2**62 or
  # more (and so does between?); pos= checks with <=>, which compares
  # such Integers as Floats: right against a bound below 2**53.
  POS_MAX = 0x1fffffffffffff

  def initialize(string = "", mode = nil)
    @string = string
    @pos = 0
    @lineno = 0
    @closed = false
    @string = @string.dup if @string.frozen? && mode.to_s.include?("w")
  end

  def self.open(*args)
    io = new(*args)
    return io unless block_given?
    yield io
  end

  def read(length = nil, outbuf = nil)
    rest = @pos < @string.bytesize ? @string.byteslice(@pos..-1) : ""
    if length.nil?
      @pos = @string.bytesize
      s = rest
    else
      return (length == 0 ? "" : nil) if rest.empty?
      s = rest.byteslice(0, length)
      @pos += s.bytesize
    end
    outbuf ? outbuf.replace(s) : s
  end

  def getc
    return nil if eof?
    c = @string.byteslice(@pos, 1)
    @pos += 1
    c
  end

  def gets(sep = "\n")
    return nil if eof?
    rest = @string.byteslice(@pos..-1)
    i = sep ? rest.index(sep) : nil
    line = i ? rest.byteslice(0, i + sep.bytesize) : rest
    @pos += line.bytesize
    @lineno += 1
    line
  end

  def each_line(sep = "\n")
    return to_enum(:each_line, sep) unless block_given?
    while (line = gets(sep))
      yield line
    end
    self
  end
  alias each each_line

  def readlines(sep = "\n")
    lines = []
    each_line(sep) { |l| lines << l }
    lines
  end

  def write(*objs)
    n = 0
    objs.each do |o|
      s = o.to_s
      if @pos >= @string.bytesize
        @string << "\0" * (@pos - @string.bytesize) << s
      else
        head = @string.byteslice(0, @pos)
        tail = @string.byteslice(@pos + s.bytesize..-1) || ""
        @string.replace(head + s + tail)
      end
      @pos += s.bytesize
      n += s.bytesize
    end
    n
  end

  def <<(obj)
    write(obj)
    self
  end

  def print(*objs)
    objs.each { |o| write(o) }
    nil
  end

  def puts(*objs)
    return write("\n") && nil if objs.empty?
    objs.flatten.each do |o|
      s = o.to_s
      write(s)
      write("\n") unless s.end_with?("\n")
    end
    nil
  end

  def printf(fmt, *args)
    write(format(fmt, *args))
    nil
  end

  def rewind
    @pos = 0
    @lineno = 0
    0
  end

  def pos=(pos)
    pos = pos.to_int
    if (pos <=> 0) < 0 || (pos <=> POS_MAX) > 0
      raise ArgumentError, "invalid position: #{pos}"
    end
    @pos = pos
  end

  def seek(offset, whence = 0)
    self.pos = case whence
               when 1 then @pos + offset
               when 2 then @string.bytesize + offset
               else offset
               end
    0
  end

  def eof?
    @pos >= @string.bytesize
  end
  alias eof eof?

  def size
    @string.bytesize
  end
  alias length size

  def tell
    @pos
  end

  def truncate(n)
    @string.replace(@string.byteslice(0, n))
    0
  end

  def close
    @closed = true
    nil
  end

  def closed?
    @closed
  end

  def sync
    true
  end

  def sync=(v)
  end

  def flush
    self
  end

  def fileno
    nil
  end

  def isatty
    false
  end
  alias tty? isatty
end
