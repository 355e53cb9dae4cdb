-- 1 when the fingerprint ARGV[1] is in the done set (a done record of this layout), else 0
if done_find(ARGV[1]) then return 1 end
return 0
