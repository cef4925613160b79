# One DSL for both servers (seed 003, slide 30): Server is Apache under
# mod_mruby and Nginx under ngx_mruby.
Server = get_server_class

Server::rputs "Hello #{Server::module_name} World!"
