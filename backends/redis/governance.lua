-- The governance pair of one source (issue 17): its breaker and its limiter
-- in one script call, so a gateway call costs Redis two round trips, not
-- four. Run as one script after breaker.lua and limiter.lua, each wrapped
-- as a function (backends/redis/governance.cpp builds the text):
--   breaker_op(KEYS, ARGV), limiter_op(KEYS, ARGV)
-- which run those scripts unchanged on their own keys and arguments.
--
-- KEYS[1] the breaker's hash, KEYS[2..7] the limiter's keys (limiter.lua)
-- ARGV[1] operation: admit | finish
-- ARGV[2] b, the number of breaker arguments; ARGV[3 .. 2 + b] the
--         breaker's arguments (breaker.lua's ARGV, operation first), the
--         rest the limiter's (limiter.lua's ARGV, operation first)
-- admit:  breaker 'enter', limiter 'acquire'. Enters the breaker; when it
--         lets the caller in, acquires a permit; a probe whose permit is
--         refused gives its lease back ('release' with its epoch).
--         -> {entry, permit}: entry as breaker 'enter' answers, permit as
--         limiter 'acquire' answers ({} when the breaker refused)
-- finish: breaker 'record', limiter 'settle_release': the end of an
--         attempt -> limiter 'settle_release''s answer

local op = ARGV[1]
local b = tonumber(ARGV[2])
local breaker_keys = {KEYS[1]}
local limiter_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]}
local breaker_args = {unpack(ARGV, 3, 2 + b)}
local limiter_args = {unpack(ARGV, 3 + b)}

if op == 'admit' then
  local entry = breaker_op(breaker_keys, breaker_args)
  if entry[1] ~= 1 then
    return {entry, {}}
  end
  local permit = limiter_op(limiter_keys, limiter_args)
  if permit[1] ~= 1 and entry[3] == 1 then
    local give_back = {unpack(breaker_args)}
    give_back[1] = 'release'
    give_back[#give_back + 1] = tostring(entry[2])
    breaker_op(breaker_keys, give_back)
  end
  return {entry, permit}
end

if op == 'finish' then
  breaker_op(breaker_keys, breaker_args)
  return limiter_op(limiter_keys, limiter_args)
end

return redis.error_reply('governance.lua: unknown operation ' .. tostring(op))
