# Edit me while the server runs.
Server = get_server_class
Server.rputs "site, version 1\n"
