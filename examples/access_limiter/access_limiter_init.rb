# access_limiter_init.rb: once at startup, in the parent (Apache
# post_config) or the master (nginx mruby_init).  Fails at startup, with a
# clear message, when the dictionary the limiter counts in is not declared.
Server = get_server_class
Server::SharedDict.new("access_limiter")
Server.errlogger Server::LOG_NOTICE,
                 "access_limiter: counting in shared dictionary access_limiter"
