-- The Redis twin of backends/memory/limiter.cpp (SPEC 5): sliding RPM/TPM
-- windows and in-flight leases of one source, shared by every node. One
-- call = one operation, atomic. Time is Redis TIME in microseconds (never
-- the caller's), and never runs backwards: the latest time seen is kept in
-- the stats hash.
--
-- KEYS[1] win    ZSET   permit number -> acquisition time (us)
-- KEYS[2] tok    HASH   permit number -> tokens (estimate or settled);
--                       field "sum" -> tokens of every entry in the window
-- KEYS[3] lease  ZSET   permit number -> lease expiry (us), live leases only
-- KEYS[4] seq    STRING the last permit number (INCR)
-- KEYS[5] stats  HASH   counters of limiter_status; "clock" (us)
-- A permit record, ARGV[2] .. number (STRING "1", PX), exists while the
-- permit is unsettled and not forgotten (see backends/memory/limiter.hpp:
-- forgotten once its lease ended and its entry left the window).
--
-- ARGV[1] operation: acquire | settle | release | status
-- ARGV[2] permit record key prefix
-- ARGV[3] window (us)   ARGV[4] lease (us)   ARGV[5] retention (ms)
-- acquire: ARGV[6] est, ARGV[7] rpm, ARGV[8] tpm, ARGV[9] max concurrency
--          ('' = no limit), ARGV[10] concurrency retry hint (us),
--          ARGV[11] not after (Unix time, us; '' = none): an acquire that
--          runs later (its client gave up; it sat in a socket buffer while
--          Redis was stalled) changes nothing and answers {0, 'late', 0}
--          -> {1, permit number} or {0, reason, retry after (us)}
-- settle:  ARGV[6] permit number, ARGV[7] actual -> 1 | 0
-- release: ARGV[6] permit number -> 1 | 0
-- settle_release: ARGV[6] permit number, ARGV[7] actual -> {settled, released}
-- settle, release and settle_release skip the clock and the pruning: they
-- touch one permit only, and an entry that aged out but was not pruned yet
-- keeps the window sum consistent (pruning subtracts its current amount).
-- status:  -> {rpm_used, tpm_used, in_flight, acquired, settled, released,
--              refused_rpm, refused_tpm, refused_concurrency, leases_expired}

local win, tok, lease, seq, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op = ARGV[1]
local rec = ARGV[2]
local window = tonumber(ARGV[3])
local lease_len = tonumber(ARGV[4])
local retention = tonumber(ARGV[5])

if op ~= 'acquire' and op ~= 'settle' and op ~= 'release' and op ~= 'status'
   and op ~= 'settle_release' then
  return redis.error_reply('limiter.lua: unknown operation ' .. tostring(op))
end

-- Numbers as exact decimal text (tostring would round to 14 digits).
local function s(x)
  return string.format('%.0f', x)
end

-- A token amount clamped to [0, 2^40] (config/limits.hpp max_entry_tokens):
-- sums stay exact doubles and HINCRBY never overflows, whatever a caller
-- or an upstream claimed.
local function tokens(x)
  x = tonumber(x)
  if x == nil or x ~= x or x < 0 then
    return 0
  end
  return math.min(math.floor(x), 1099511627776)
end

local function limit(text)
  if text == '' then
    return nil
  end
  return tonumber(text)
end

-- Calls `fn(chunk)` for slices of `list` short enough for unpack().
local function chunked(list, fn)
  for i = 1, #list, 1000 do
    fn({unpack(list, i, math.min(i + 999, #list))})
  end
end

-- Counters, the sequence and the leases live as long as the source is used.
local function keep()
  redis.call('PEXPIRE', stats, s(retention))
  redis.call('PEXPIRE', seq, s(retention))
  redis.call('PEXPIRE', lease, s(retention))
end

-- -- settle and release: one permit, no clock ------------------------------------

local function settle(n, actual)
  if redis.call('DEL', rec .. n) == 0 then
    return 0 -- settled before, forgotten, or never issued
  end
  redis.call('HINCRBY', stats, 'settled', 1)
  local est = redis.call('HGET', tok, n)
  if est then
    -- May exceed what the estimate reserved (see the memory limiter).
    redis.call('HSET', tok, n, s(actual))
    redis.call('HINCRBY', tok, 'sum', s(actual - tonumber(est)))
  end
  return 1
end

local function release(n)
  local expiry = redis.call('ZSCORE', lease, n)
  if not expiry then
    return 0 -- released before, expired, or never issued
  end
  redis.call('ZREM', lease, n)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local clock = tonumber(redis.call('HGET', stats, 'clock') or '0')
  if tonumber(expiry) <= math.max(now, clock) then
    -- The lease ran out before this release: it counts as expired.
    redis.call('HINCRBY', stats, 'leases_expired', 1)
    if not redis.call('ZSCORE', win, n) then
      redis.call('DEL', rec .. n)
    end
    return 0
  end
  redis.call('HINCRBY', stats, 'released', 1)
  if not redis.call('ZSCORE', win, n) then
    redis.call('DEL', rec .. n)
  end
  return 1
end

if op == 'settle' then
  return settle(ARGV[6], tokens(ARGV[7]))
end

if op == 'release' then
  return release(ARGV[6])
end

if op == 'settle_release' then
  local settled = settle(ARGV[6], tokens(ARGV[7]))
  return {settled, release(ARGV[6])}
end

-- -- clock ----------------------------------------------------------------------

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local clock = tonumber(redis.call('HGET', stats, 'clock') or '0')
if clock > now then
  now = clock
end
redis.call('HSET', stats, 'clock', s(now))

-- Leases first: a lease that ran out frees its slot; its record goes when
-- the entry has left the window too.
local ended = redis.call('ZRANGEBYSCORE', lease, '-inf', s(now))
if #ended > 0 then
  for _, n in ipairs(ended) do
    if not redis.call('ZSCORE', win, n) then
      redis.call('DEL', rec .. n)
    end
  end
  redis.call('ZREMRANGEBYSCORE', lease, '-inf', s(now))
  redis.call('HINCRBY', stats, 'leases_expired', #ended)
end

-- Then the window: an entry leaves it `window` after its acquisition.
local edge = s(now - window)
local old = redis.call('ZRANGEBYSCORE', win, '-inf', edge)
if #old > 0 then
  local freed = 0
  chunked(old, function(chunk)
    local amounts = redis.call('HMGET', tok, unpack(chunk))
    for i, n in ipairs(chunk) do
      freed = freed + tonumber(amounts[i] or '0')
      if not redis.call('ZSCORE', lease, n) then
        redis.call('DEL', rec .. n)
      end
    end
    redis.call('HDEL', tok, unpack(chunk))
  end)
  redis.call('ZREMRANGEBYSCORE', win, '-inf', edge)
  if redis.call('ZCARD', win) == 0 then
    redis.call('DEL', tok)
  else
    redis.call('HINCRBY', tok, 'sum', s(-freed))
  end
end

-- -- operations -----------------------------------------------------------------

local function refuse(reason, retry)
  redis.call('HINCRBY', stats, 'refused_' .. reason, 1)
  keep()
  return {0, reason, math.max(retry, 0)}
end

if op == 'acquire' then
  local not_after = ARGV[11]
  if not_after and not_after ~= ''
     and tonumber(t[1]) * 1000000 + tonumber(t[2]) > tonumber(not_after) then
    redis.call('HINCRBY', stats, 'late_acquires', 1)
    return {0, 'late', 0}
  end
  local est = tokens(ARGV[6])
  local rpm = limit(ARGV[7])
  local tpm = limit(ARGV[8])
  local cap = limit(ARGV[9])
  local concurrency_retry = tonumber(ARGV[10])
  if rpm then
    local used = redis.call('ZCARD', win)
    if rpm <= 0 then
      return refuse('rpm', window)
    end
    if used + 1 > rpm then
      -- It fits once used + 1 - rpm entries have aged out; the last of them
      -- is at rank used - rpm (0 = the oldest).
      local e = redis.call('ZRANGE', win, used - rpm, used - rpm, 'WITHSCORES')
      return refuse('rpm', tonumber(e[2]) + window - now)
    end
  end
  if tpm then
    if est > tpm then
      return refuse('tpm', window)
    end
    local sum = tonumber(redis.call('HGET', tok, 'sum') or '0')
    if sum + est > tpm then
      -- The earliest time enough tokens have aged out for `est` to fit.
      local excess = sum + est - tpm
      local freed = 0
      local retry = window
      local first = 0
      local found = false
      while not found do
        local page = redis.call('ZRANGE', win, first, first + 255, 'WITHSCORES')
        if #page == 0 then
          break
        end
        local members = {}
        for j = 1, #page, 2 do
          members[#members + 1] = page[j]
        end
        local amounts = redis.call('HMGET', tok, unpack(members))
        for j = 1, #members do
          freed = freed + tonumber(amounts[j] or '0')
          if freed >= excess then
            retry = tonumber(page[2 * j]) + window - now
            found = true
            break
          end
        end
        first = first + 256
      end
      return refuse('tpm', retry)
    end
  end
  if cap then
    local live = redis.call('ZCARD', lease)
    if live >= cap then
      local retry = concurrency_retry
      if live > 0 then
        local e = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
        retry = math.min(retry, tonumber(e[2]) - now)
      end
      return refuse('concurrency', retry)
    end
  end
  -- Granted. A sequence that expired restarts above every number it gave
  -- (seeded with the time in us), so a stale permit never names a new one.
  if redis.call('EXISTS', seq) == 0 then
    redis.call('SET', seq, s(now))
  end
  local n = s(redis.call('INCR', seq))
  redis.call('ZADD', win, s(now), n)
  redis.call('HSET', tok, n, s(est))
  redis.call('HINCRBY', tok, 'sum', s(est))
  redis.call('ZADD', lease, s(now + lease_len), n)
  local record_ms = math.ceil(math.max(lease_len, window) / 1000) + 1000
  redis.call('SET', rec .. n, '1', 'PX', s(record_ms))
  redis.call('HINCRBY', stats, 'acquired', 1)
  -- Every entry has left the window one window after the newest one.
  local window_ms = s(math.ceil(window / 1000) + 1000)
  redis.call('PEXPIRE', win, window_ms)
  redis.call('PEXPIRE', tok, window_ms)
  -- The long-lived keys' retention (a day or more) is refreshed every 32nd
  -- permit and by status: three fewer calls on the hot path.
  if tonumber(n) % 32 == 1 then
    keep()
  end
  return {1, n}
end

if op == 'status' then
  keep()
  local c = redis.call('HMGET', stats, 'acquired', 'settled', 'released',
                       'refused_rpm', 'refused_tpm', 'refused_concurrency',
                       'leases_expired')
  local out = {redis.call('ZCARD', win),
               tonumber(redis.call('HGET', tok, 'sum') or '0'),
               redis.call('ZCARD', lease)}
  for i = 1, #c do
    out[#out + 1] = tonumber(c[i] or '0')
  end
  return out
end
