# The Ruby parts of Regexp and MatchData (src/lib/mrb_regexp.c and
# mrb_matchdata.c hold the matching).  Nothing here names $~ or $1: a
# global named anywhere makes every match store it.

class Regexp
  def self.union(*pats)
    pats = pats[0] if pats.size == 1 && pats[0].is_a?(Array)
    return Regexp.new("(?!)") if pats.empty?
    return pats[0] if pats.size == 1 && pats[0].is_a?(Regexp)
    Regexp.new(pats.map { |p| p.is_a?(Regexp) ? p.to_s : Regexp.escape(p.to_s) }.join("|"))
  end

  # "(?mi-x:source)", as Ruby embeds a pattern in another
  def to_s
    o = options
    on = ""
    off = ""
    [[MULTILINE, "m"], [IGNORECASE, "i"], [EXTENDED, "x"]].each do |bit, c|
      if o & bit != 0
        on << c
      else
        off << c
      end
    end
    off = "-" + off unless off.empty?
    "(?#{on}#{off}:#{source})"
  end

  def inspect
    s = source
    out = "/"
    i = 0
    while i < s.size
      c = s[i]
      if c == "\\" && i + 1 < s.size
        out << c << s[i + 1]
        i += 2
        next
      end
      out << (c == "/" ? "\\/" : c)
      i += 1
    end
    out << "/"
    o = options
    out << "m" if o & MULTILINE != 0
    out << "i" if o & IGNORECASE != 0
    out << "x" if o & EXTENDED != 0
    out << "n" if o & NOENCODING != 0
    out
  end

  def freeze
    self
  end
end

class MatchData
  def names
    regexp.names
  end

  def named_captures
    h = {}
    names.each { |n| h[n] = self[n] }
    h
  end

  def offset(n)
    [self.begin(n), self.end(n)]
  end

  def values_at(*idx)
    idx.map { |i| self[i] }
  end

  def ==(other)
    other.is_a?(MatchData) && string == other.string &&
      regexp == other.regexp && offset(0) == other.offset(0)
  end

  def inspect
    s = "#<MatchData #{self[0].inspect}"
    n = names
    (1...size).each do |i|
      label = n.empty? ? i.to_s : n[i - 1].to_s
      s << " #{label}:#{self[i].inspect}"
    end
    s << ">"
  end
end

class Symbol
  def =~(pat)
    to_s =~ pat
  end

  def match(pat, pos = 0, &blk)
    to_s.match(pat, pos, &blk)
  end

  def match?(pat, pos = 0)
    to_s.match?(pat, pos)
  end
end
