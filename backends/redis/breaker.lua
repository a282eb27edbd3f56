-- The Redis twin of backends/memory/breaker.cpp (SPEC 6): the state machine
-- of one source, shared by every node. One call = one operation, atomic.
-- Time is Redis TIME in microseconds (never the caller's), and never runs
-- backwards: the latest time seen is kept as "clock".
--
-- KEYS[1] HASH, every field of the breaker:
--   state (closed | open | half_open), epoch, failure_count, reopen_streak,
--   open_until, probe_until (us), closed_since (us; absent while not closed
--   and before the first close), bucket (id of the current rate bucket;
--   absent before the first call), a0 f0 (attempts and failures of the
--   current bucket), a1 f1 (the bucket before), opens, probes,
--   probe_failures, clock (us)
--
-- ARGV[1] operation: enter | record | release | status
-- ARGV[2] threshold  ARGV[3] cooldown (us)  ARGV[4] min_calls
-- ARGV[5] fail_rate  ARGV[6] window (us)  ARGV[7] max cooldown (us)
-- ARGV[8] probe lease (us)  ARGV[9] retention (ms)
-- record:  ARGV[10] epoch, ARGV[11] feed: s (success), n (success, no
--          count), f (failure), d (force open), x (none)  -> 1
-- release: ARGV[10] epoch -> 1
-- enter:   -> {allowed, epoch, probe, retry after (us)}
-- status:  -> {state, epoch, failure_count, reopen_streak, open for (us),
--              window attempts, window failures, probe in flight, opens,
--              probes, probe_failures}

local key = KEYS[1]
local op = ARGV[1]
local threshold = tonumber(ARGV[2])
local cooldown = tonumber(ARGV[3])
local min_calls = tonumber(ARGV[4])
local fail_rate = tonumber(ARGV[5])
local window = tonumber(ARGV[6])
local max_cooldown = tonumber(ARGV[7])
local probe_lease = tonumber(ARGV[8])
local retention = tonumber(ARGV[9])

if op ~= 'enter' and op ~= 'record' and op ~= 'release' and op ~= 'status' then
  return redis.error_reply('breaker.lua: unknown operation ' .. tostring(op))
end

-- Numbers as exact decimal text (tostring would round to 14 digits); %d
-- for whole numbers a double holds exactly, the same text as %.0f at a
-- third of its cost in Lua 5.1.
local exact = 9007199254740992 -- 2^53
local function s(x)
  if x == math.floor(x) and x > -exact and x < exact then
    return string.format('%d', x)
  end
  return string.format('%.0f', x)
end

-- -- enter while closed: read-only ---------------------------------------------

-- The usual case needs two fields and writes nothing (issue 17): the rate
-- buckets and the clock move on with the next record.
if op == 'enter' then
  local quick = redis.call('HMGET', key, 'state', 'epoch')
  if quick[1] == false or quick[1] == 'closed' then
    return {1, tonumber(quick[2] or '0'), 0, 0}
  end
end

-- -- a success while closed: one increment -------------------------------------

-- The usual record: closed, no failure counted, the rate bucket still the
-- current one. It counts the attempt and changes nothing else.
if op == 'record' and ARGV[11] == 's' then
  local q = redis.call('HMGET', key, 'state', 'epoch', 'failure_count',
                       'bucket', 'clock')
  if q[1] == 'closed' and tonumber(ARGV[10]) >= tonumber(q[2] or '0')
     and (q[3] == false or q[3] == '0') and q[4] and window > 0 then
    local t = redis.call('TIME')
    local now = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]),
                         tonumber(q[5] or '0'))
    if math.floor(now / (window / 2)) == tonumber(q[4]) then
      -- The retention (a day, and more than the window) is looked at every
      -- 64th attempt here, and by the first record of each bucket below.
      if redis.call('HINCRBY', key, 'a0', 1) % 64 == 0
         and redis.call('PTTL', key) < retention / 2 then
        redis.call('PEXPIRE', key, s(retention))
      end
      return 1
    end
  end
end

-- -- load -----------------------------------------------------------------------

local h = {}
local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do
  h[raw[i]] = raw[i + 1]
end

local function num(field)
  return tonumber(h[field] or '0')
end

local function opt(field)
  if h[field] == nil then
    return nil
  end
  return tonumber(h[field])
end

local state = h.state or 'closed'
local epoch = num('epoch')
local failure_count = num('failure_count')
local reopen_streak = num('reopen_streak')
local open_until = num('open_until')
local probe_until = num('probe_until')
local closed_since = opt('closed_since')
local bucket = opt('bucket')
local a0, f0, a1, f1 = num('a0'), num('f0'), num('a1'), num('f1')
local opens, probes, probe_failures = num('opens'), num('probes'),
                                      num('probe_failures')

-- -- clock and window -----------------------------------------------------------

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local clock = opt('clock')
if clock and clock > now then
  now = clock
end

-- Two buckets of window / 2: the current one and the one before it.
local half = window / 2
if half > 0 then
  local id = math.floor(now / half)
  if bucket == nil or id > bucket then
    if bucket ~= nil and id == bucket + 1 then
      a1, f1 = a0, f0
    else
      a1, f1 = 0, 0
    end
    a0, f0 = 0, 0
    bucket = id
  end
end

-- -- transitions ----------------------------------------------------------------

local function open_for(duration)
  state = 'open'
  open_until = now + duration
  probe_until = 0
  closed_since = nil -- so only time spent closed decays the streak
  epoch = epoch + 1
  opens = opens + 1
end

-- The decay of reopen_streak for the time spent closed; a no-op unless
-- the circuit is closed.
local function decay_streak()
  if closed_since == nil or reopen_streak == 0 or not (cooldown > 0) then
    return
  end
  local steps = math.floor((now - closed_since) / cooldown)
  if steps >= reopen_streak then
    reopen_streak = 0
  elseif steps > 0 then
    reopen_streak = reopen_streak - steps
  end
end

local function trip()
  decay_streak()
  -- cooldown x 2^streak; a huge power is inf, which the cap absorbs.
  local duration = cooldown
  if duration > 0 then
    duration = duration * 2 ^ math.min(reopen_streak, 4096)
  end
  open_for(math.min(duration, max_cooldown))
end

local function force()
  decay_streak()
  open_for(max_cooldown)
end

local function close()
  state = 'closed'
  failure_count = 0
  a0, f0, a1, f1 = 0, 0, 0, 0
  probe_until = 0
  closed_since = now
end

local function give_back_probe()
  state = 'open'
  open_until = now
  probe_until = 0
end

-- -- save -----------------------------------------------------------------------

local function save()
  -- Only the fields that changed: a success while closed writes one or two.
  local fields = {state = state, epoch = s(epoch),
                  failure_count = s(failure_count),
                  reopen_streak = s(reopen_streak),
                  open_until = s(open_until), probe_until = s(probe_until),
                  a0 = s(a0), f0 = s(f0), a1 = s(a1), f1 = s(f1),
                  opens = s(opens), probes = s(probes),
                  probe_failures = s(probe_failures), clock = s(now)}
  if closed_since ~= nil then
    fields.closed_since = s(closed_since)
  end
  if bucket ~= nil then
    fields.bucket = s(bucket)
  end
  local changed = {}
  for field, value in pairs(fields) do
    if h[field] ~= value then
      changed[#changed + 1] = field
      changed[#changed + 1] = value
    end
  end
  if #changed > 0 then
    redis.call('HSET', key, unpack(changed))
  end
  if closed_since == nil and h.closed_since ~= nil then
    redis.call('HDEL', key, 'closed_since')
  end
  if bucket == nil and h.bucket ~= nil then
    redis.call('HDEL', key, 'bucket')
  end
  -- The retention (a day or more) is refreshed once half of it is gone.
  if redis.call('PTTL', key) < retention / 2 then
    redis.call('PEXPIRE', key, s(retention))
  end
end

-- -- operations -----------------------------------------------------------------

if op == 'enter' then
  local result
  if state == 'closed' then
    result = {1, epoch, 0, 0}
  elseif state == 'open' and now < open_until then
    result = {0, epoch, 0, open_until - now}
  elseif state == 'half_open' and now < probe_until then
    result = {0, epoch, 0, probe_until - now}
  else
    -- Open past open_until, or half-open with an expired lease: this
    -- caller probes.
    state = 'half_open'
    probe_until = now + probe_lease
    probes = probes + 1
    result = {1, epoch, 1, 0}
  end
  save()
  return result
end

if op == 'record' then
  local from = tonumber(ARGV[10])
  local feed = ARGV[11]
  if from < epoch then
    -- from before the last open: fenced off
  elseif state ~= 'closed' then
    -- Only a probe reports the current epoch while not closed.
    if feed == 's' or feed == 'n' then
      close()
    elseif feed == 'f' then
      probe_failures = probe_failures + 1
      reopen_streak = reopen_streak + 1
      trip()
    elseif feed == 'd' then
      force()
    elseif feed == 'x' then
      if state == 'half_open' then
        give_back_probe()
      end
    end
  elseif feed == 's' then
    failure_count = 0
    a0 = a0 + 1
  elseif feed == 'n' then
    failure_count = 0
  elseif feed == 'f' then
    failure_count = failure_count + 1
    a0 = a0 + 1
    f0 = f0 + 1
    if failure_count >= threshold then
      trip()
    else
      local attempts = a0 + a1
      local failures = f0 + f1
      if attempts >= min_calls and failures / attempts >= fail_rate then
        failure_count = threshold
        trip()
      end
    end
  elseif feed == 'd' then
    force()
  end
  save()
  return 1
end

if op == 'release' then
  local from = tonumber(ARGV[10])
  if state == 'half_open' and from == epoch then
    give_back_probe()
  end
  save()
  return 1
end

if op == 'status' then
  local open_for_us = 0
  local in_flight = 0
  local shown = state
  if state == 'open' then
    open_for_us = math.max(open_until - now, 0)
    -- Past open_until the next caller probes: shown as half-open with no
    -- probe in flight, like the memory breaker.
    if now >= open_until then
      shown = 'half_open'
    end
  elseif state == 'half_open' and now < probe_until then
    in_flight = 1
  end
  save()
  return {shown, epoch, failure_count, reopen_streak, open_for_us, a0 + a1,
          f0 + f1, in_flight, opens, probes, probe_failures}
end
