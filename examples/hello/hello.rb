# One DSL for both servers (the mod_mruby slides, slide 30): Server is Apache under
# mod_mruby and Nginx under ngx_mruby.
Server = get_server_class

Server::rputs "Hello #{Server::module_name} World!"
