# The stat scripts this worker runs an older version of than the file on
# disk (a change that does not compile, a file removed, a writer at work).
Server = get_server_class

stale = Server.stale_scripts
if stale.empty?
  Server.rputs "all stat scripts current\n"
else
  stale.each do |s|
    age = Time.now.to_i - s["since"]
    Server.rputs "#{s["path"]}: serving #{s["serving"]} version " \
                 "for #{age} s: #{s["reason"]}\n"
  end
end
