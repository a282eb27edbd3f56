-- The lease of the response cache's fleet single-flight (issue 14), the
-- Redis twin of the leases in backends/memory/cache.cpp: while one gateway
-- calls upstream for a key, the others wait for its value. One call = one
-- operation, atomic; lease lifetimes are Redis' own (PX).
--
-- KEYS[1] lease  STRING owner token (PX = the lease)
-- KEYS[2] value  STRING the stored answer (claim only)
--
-- ARGV[1] operation: claim | renew | release
-- ARGV[2] the caller's token   ARGV[3] lease (ms)
--
-- claim:   {1, value} when a value is stored; else {2} after taking the
--          lease for the token when nobody holds it (or the token does);
--          else {3} (another token holds it)
-- renew:   1 after restarting the token's lease, 0 when it holds none
-- release: 1 after deleting the token's lease, 0 when it holds none

local op, token = ARGV[1], ARGV[2]
local holder = redis.call('GET', KEYS[1])

if op == 'claim' then
  local v = redis.call('GET', KEYS[2])
  if v then
    return {1, v}
  end
  if holder and holder ~= token then
    return {3}
  end
  redis.call('SET', KEYS[1], token, 'PX', ARGV[3])
  return {2}
end

if holder ~= token then
  return 0
end
if op == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
end
return 1
