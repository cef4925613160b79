# Fixups: holds a worker busy for a while, to make load on demand (a sleep
# outside the content handler blocks its thread).
Apache.sleep 2
