local n = to_dead(ARGV[1], ARGV[2], tonumber(ARGV[3]))
flush()
return n
