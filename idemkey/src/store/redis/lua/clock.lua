-- Prepended to every script: the store's clock and number formatting.
-- now_ms() reads Redis's own clock (TIME), never the caller's; ms(x)
-- writes a millisecond count as an integer string (Lua numbers are
-- doubles, exact far beyond the year 9999 in milliseconds).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(x) return string.format('%.0f', x) end
