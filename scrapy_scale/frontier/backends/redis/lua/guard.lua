-- Redis Cluster: run nowhere but on the one node that owns this slot. While the slot moves
-- to another node (a reshard), a script could see some of its keys and not others (the
-- moved ones missing on the old node, the unmoved ones on the new): it must not write
-- anything then. A command on two keys of the slot, one never written, is refused inside
-- a script on both nodes of a moving slot (ASK or TRYAGAIN: "non local key") before any
-- write, and answered by a node that owns the slot alone (or a single node). The client
-- retries until the move is done.
redis.call('EXISTS', KEYS[1]..':run', KEYS[1]..':slot-guard')
