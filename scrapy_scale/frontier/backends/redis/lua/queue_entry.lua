-- A ready queue holds a 40-hex fingerprint as its 20 bytes (half the memory); any other
-- key as it is. Entries written as hex text (an earlier layout) read back as they are.
local HEX20 = string.rep('%02x', 20)
local function qpack(fp)
  if #fp == 40 and not string.find(fp, '[^0-9a-f]') then
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
