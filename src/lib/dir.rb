# The Ruby parts of Dir (src/lib/mrb_dir.c makes the system calls).

class Dir
  include Enumerable

  attr_reader :path

  def self.open(path)
    d = new(path)
    return d unless block_given?
    yield d
  end

  def self.foreach(path, &blk)
    entries(path).each(&blk)
  end

  def self.children(path)
    entries(path) - [".", ".."]
  end

  def self.each_child(path, &blk)
    children(path).each(&blk)
  end

  def self.empty?(path)
    children(path).empty?
  end

  # with a block, the previous directory is restored after it
  def self.chdir(path = ENV["HOME"])
    return __chdir(path) unless block_given?
    old = pwd
    __chdir(path)
    begin
      yield path
    ensure
      __chdir(old)
    end
  end

  def initialize(path)
    @path = path
    @entries = Dir.entries(path)
    @pos = 0
  end

  def read
    e = @entries[@pos]
    @pos += 1 if e
    e
  end

  def each(&blk)
    @entries.each(&blk)
    self
  end

  def children
    @entries - [".", ".."]
  end

  def rewind
    @pos = 0
    self
  end

  def tell
    @pos
  end
  alias pos tell

  def close
    nil
  end
end
