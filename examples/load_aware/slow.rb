# Holds a worker busy for a while, to make load on demand.
Apache.sleep 2
Apache.rputs "slow done\n"
