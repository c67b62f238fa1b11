-- wrk: POST /charges (the provider simulator), every request a FRESH random v4-shaped UUID
-- Idempotency-Key and a fresh order id: the simulator's own capacity for new charges.
-- Env: SECRET (a --token of the simulator), PORTS (see common.lua), WRK_DIR (this folder).
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local base = {
  ["Content-Type"] = "application/json",
  ["Authorization"] = "Bearer " .. assert(os.getenv("SECRET"), "set SECRET"),
}
local r = math.random

function init(args)
  seed_random()
  reset_counts()
end

local function uuid4()
  return string.format("%04x%04x-%04x-4%03x-%04x-%04x%04x%04x",
    r(0, 65535), r(0, 65535), r(0, 65535), r(0, 4095),
    32768 + r(0, 16383), r(0, 65535), r(0, 65535), r(0, 65535))
end

function request()
  base["Idempotency-Key"] = '"' .. uuid4() .. '"'
  local body = '{"order_id":"' .. uuid4() .. '","amount_cents":5980,"currency":"EUR"}'
  return wrk.format("POST", "/charges", base, body)
end

function response(status, headers, b) count(status, headers) end
