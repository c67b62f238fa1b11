-- wrk: POST /orders (idemkey-server), every request a FRESH random v4-shaped UUID Idempotency-Key.
-- Env: TOKEN (bearer token), PORTS (see common.lua), WRK_DIR (this folder).
-- API=lab switches to the article's Node lab: POST /pedidos, {"sku":"LIBRO-TS","cantidad":2}, no auth.
-- ORDERS_PATH=/purchases posts the same body to idemkey-server's purchases instead.
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local lab = os.getenv("API") == "lab"
local orders_path = os.getenv("ORDERS_PATH")
if orders_path == nil or orders_path == "" then orders_path = "/orders" end
local path = lab and "/pedidos" or orders_path
local body = lab and '{"sku":"LIBRO-TS","cantidad":2}' or '{"sku":"LIBRO-TS","quantity":2}'
local base = { ["Content-Type"] = "application/json" }
if not lab then base["Authorization"] = "Bearer " .. assert(os.getenv("TOKEN"), "set TOKEN") end
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
  return wrk.format("POST", path, base, body)
end

function response(status, headers, b) count(status, headers) end
