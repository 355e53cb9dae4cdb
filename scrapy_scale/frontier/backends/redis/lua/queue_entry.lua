-- A ready queue holds a 40-hex fingerprint as its 20 bytes (half the memory); any other
-- key as it is. Entries written as hex text (an earlier layout) read back as they are.
local HEX20 = string.rep('%02x', 20)
-- A fingerprint of hex characters as the client packed it to bytes (PACKED[fp]: its hex
-- from the 1st character packed, PACKED2[fp]: from the 2nd; an odd last character kept as
-- it is): the packing in Lua (a function call per byte) was a large share of a call's
-- time. Two flat tables, not a table per fingerprint (one allocation fewer per record). A
-- fingerprint the client sent no packing for is packed here, the same way.
local PACKED, PACKED2 = {}, {}
local function packed(fp, p0, p1)
  if p0 and p0 ~= '' then PACKED[fp] = p0 PACKED2[fp] = p1 end
end
local function qpack(fp)
  if #fp == 40 and not string.find(fp, '[^0-9a-f]') then
    local pk = PACKED[fp]
    if pk then return pk end
    return (string.gsub(fp, '..', function(h) return string.char(tonumber(h, 16)) end))
  end
  return fp
end
local function qunpack(e)
  if #e == 20 and string.find(e, '[^0-9a-f]') then
    return string.format(HEX20, string.byte(e, 1, 20))
  end
  return e
end
