# Something to count: ?fail raises, ?slow waits 30 ms (without holding
# the worker), anything else answers at once.
Server = get_server_class
args = Server::Request.new.args.to_s
raise ArgumentError, "asked to fail" if args == "fail"
Server::Async.sleep 30 if args == "slow"
Server.rputs "worked\n"
