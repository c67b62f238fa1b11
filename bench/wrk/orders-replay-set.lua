-- wrk: POST /orders (idemkey-server) where every request REPLAYS a key drawn at random from a
-- preloaded set (bench/large-table.sh): key i of KEYS_N is 00000000-0000-4000-8000-<i as 12 hex>,
-- stored with the fingerprint of this body, so every answer is a stored 201 + Idempotent-Replayed.
-- Uniform over the set: with the replay cache off, every request reads a row anywhere in the table.
-- Env: TOKEN, KEYS_N, PORTS, WRK_DIR.
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local n = assert(tonumber(os.getenv("KEYS_N")), "set KEYS_N=<number of preloaded keys>")
local body = '{"sku":"LIBRO-TS","quantity":2}'
local base = {
  ["Content-Type"] = "application/json",
  ["Authorization"] = "Bearer " .. assert(os.getenv("TOKEN"), "set TOKEN"),
}
local r = math.random

function init(args)
  seed_random()
  reset_counts()
end

function request()
  base["Idempotency-Key"] = string.format('"00000000-0000-4000-8000-%012x"', r(1, n))
  return wrk.format("POST", "/orders", base, body)
end

function response(status, headers, b) count(status, headers) end
