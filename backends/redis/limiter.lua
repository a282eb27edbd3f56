-- The Redis twin of backends/memory/limiter.cpp (SPEC 5): sliding RPM/TPM
-- windows and in-flight leases of one source, shared by every node. One
-- call = one operation, atomic. Time is Redis TIME in microseconds (never
-- the caller's), and never runs backwards: it is at least the newest
-- acquisition time (status, release and pruning also read the clock saved
-- by the last pruning; a settle_release that settled reads the newest
-- acquisition with the permit's tokens and takes that instead).
--
-- KEYS[1] win    ZSET   permit number -> acquisition time (us)
-- KEYS[2] tok    HASH   permit number -> tokens (estimate or settled);
--                       field "sum" -> tokens of every entry in `win`,
--                       field "newest" -> the newest acquisition time (us),
--                       field "expires" -> when `win` and `tok` expire
--                       (Redis TIME, us), as last set
-- KEYS[3] lease  ZSET   permit number -> lease expiry (us), live leases only,
--                       and the marker (below)
-- KEYS[4] seq    STRING the last permit number (INCR)
-- KEYS[5] stats  HASH   counters of limiter_status ("both": permits settled
--                       and released by one settle_release, counted in
--                       settled and released); "clock" (us)
-- KEYS[6] open   ZSET   permit number -> when it may be forgotten (us), for
--                       the permits not settled yet (see
--                       backends/memory/limiter.hpp: forgotten once its
--                       lease ended and its entry left the window); its
--                       score is its expiry, so a permit of a node that
--                       died goes with the next pruning; and the marker
--
-- `lease` and `open` also hold the member 'k' scored +inf (`marker`), which
-- no release, settle or pruning removes: an empty set is a key Redis
-- deletes, and the next acquire's ZADD would create it again without a
-- TTL, so these two never empty. An acquire adds the marker with its
-- permit (same ZADD); when the marker was missing, the key is new and its
-- TTL is set then (keep). Their sizes are counted below +inf (ZCOUNT).
--
-- Lean on purpose (issue 17): the hot path reads the sizes of `win` and
-- `lease` and the token sum, which can only overstate the usage (entries
-- that aged out stay until the next pruning). Only when a limit looks
-- reached does it prune and decide on exact figures; it also prunes every
-- 64th permit and on status, so the sets stay small. Each redis.call costs
-- one to three microseconds on top of its command (INFO commandstats: an
-- acquire's EVALSHA took 52 us for 15 us of commands), so the hot paths
-- make few: the token sum, the newest acquisition and the window keys'
-- expiry are one read; a grant writes its tokens, the new sum, the newest
-- acquisition (and, about once a second, the expiry) in one HSET; a settle
-- reads its permit's tokens with the sum and writes both back at once; a
-- settle_release takes its clock floor from that read and counts both in
-- one increment. Numbers are formatted with %d where exact (%.0f costs
-- three times as much in Lua 5.1).
--
-- ARGV[1] operation: acquire | settle | release | settle_release | status
-- ARGV[2] window (us)   ARGV[3] lease (us)   ARGV[4] retention (ms)
-- acquire: ARGV[5] est, ARGV[6] rpm, ARGV[7] tpm, ARGV[8] max concurrency
--          ('' = no limit), ARGV[9] concurrency retry hint (us),
--          ARGV[10] not after (Unix time, us; '' = none): an acquire that
--          runs later (its client gave up; it sat in a socket buffer while
--          Redis was stalled) changes nothing and answers {0, 'late', 0}
--          -> {1, permit number} or {0, reason, retry after (us)}
-- settle:  ARGV[5] permit number, ARGV[6] actual -> 1 | 0
-- release: ARGV[5] permit number -> 1 | 0
-- settle_release: ARGV[5] permit number, ARGV[6] actual -> {settled, released}
-- status:  -> {rpm_used, tpm_used, in_flight, acquired, settled, released,
--              refused_rpm, refused_tpm, refused_concurrency, leases_expired}

local win, tok, lease, seq, stats, open = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                          KEYS[5], KEYS[6]
local op = ARGV[1]
local window = tonumber(ARGV[2])
local lease_len = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])

if op ~= 'acquire' and op ~= 'settle' and op ~= 'release' and op ~= 'status'
   and op ~= 'settle_release' then
  return redis.error_reply('limiter.lua: unknown operation ' .. tostring(op))
end

-- See the header: the member of `lease` and `open` that keeps them.
local marker = 'k'

-- Whole numbers below this are exact in a double (2^53).
local exact = 9007199254740992

-- Numbers as exact decimal text (tostring would round to 14 digits); %d
-- for whole numbers a double holds exactly, the same text as %.0f.
local function s(x)
  if x == math.floor(x) and x > -exact and x < exact then
    return string.format('%d', x)
  end
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

local function redis_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Redis TIME, never before the clock saved by the last pruning.
local function saved_clock(raw)
  local clock = tonumber(redis.call('HGET', stats, 'clock') or '0')
  return math.max(raw, clock)
end

-- Counters, the sequence, the leases and the unsettled permits live as long
-- as the source is used.
local function keep()
  redis.call('PEXPIRE', stats, s(retention))
  redis.call('PEXPIRE', seq, s(retention))
  redis.call('PEXPIRE', lease, s(retention))
  redis.call('PEXPIRE', open, s(retention))
end

-- -- settle and release: one permit ------------------------------------------------

-- settle and release count nothing in stats but expired leases: the
-- operations count what they did (`count`).
-- -> settled (1 | 0), and the newest acquisition time when it was read
-- (nil when not settled, or `tok` is gone).
local function settle(n, actual)
  if redis.call('ZREM', open, n) == 0 then
    return 0 -- settled before, forgotten, or never issued
  end
  local cur = redis.call('HMGET', tok, n, 'sum', 'newest')
  if cur[1] then
    -- May exceed what the estimate reserved (see the memory limiter). An
    -- entry that aged out but was not pruned yet keeps the sum consistent:
    -- pruning subtracts its current amount.
    local delta = actual - tonumber(cur[1])
    local sum = tonumber(cur[2] or '0') + delta
    if sum >= 0 and sum < exact then
      redis.call('HSET', tok, n, s(actual), 'sum', s(sum))
    else
      -- Past 2^53 (8,192 entries at the 2^40 cap) a double rounds: Redis'
      -- integer arithmetic keeps the sum exact.
      redis.call('HSET', tok, n, s(actual))
      redis.call('HINCRBY', tok, 'sum', s(delta))
    end
  end
  return 1, cur[3] and tonumber(cur[3]) or nil
end

-- `floor`: a time the clock is known to have reached (the newest
-- acquisition the settle before it read), or nil to read the clock saved
-- by the last pruning.
local function release(n, floor)
  local expiry = redis.call('ZSCORE', lease, n)
  if not expiry then
    return 0 -- released before, expired, or never issued
  end
  redis.call('ZREM', lease, n)
  local now = redis_time()
  if floor then
    now = math.max(now, floor)
  else
    now = saved_clock(now)
  end
  if tonumber(expiry) <= now then
    -- The lease ran out before this release: it counts as expired.
    redis.call('HINCRBY', stats, 'leases_expired', 1)
    return 0
  end
  return 1
end

-- One increment for what an operation did: "both" for a permit settled and
-- released at once (status adds it to settled and released).
local function count(settled, released)
  local field = nil
  if settled == 1 then
    field = released == 1 and 'both' or 'settled'
  elseif released == 1 then
    field = 'released'
  end
  if field then
    redis.call('HINCRBY', stats, field, 1)
  end
end

if op == 'settle' then
  local settled = settle(ARGV[5], tokens(ARGV[6]))
  count(settled, 0)
  return settled
end

if op == 'release' then
  local released = release(ARGV[5])
  count(0, released)
  return released
end

if op == 'settle_release' then
  -- The newest acquisition the settle read is the clock's floor (no read
  -- of the saved clock); without it, the saved clock.
  local settled, newest = settle(ARGV[5], tokens(ARGV[6]))
  local released = release(ARGV[5], newest)
  count(settled, released)
  return {settled, released}
end

-- -- clock and pruning ------------------------------------------------------------

local raw = redis_time()
-- The acquire path reads only the newest acquisition (with the token sum);
-- status and pruning also the saved clock.
local now = raw
if op ~= 'acquire' then
  now = saved_clock(raw)
end
local head = redis.call('HMGET', tok, 'sum', 'newest', 'expires')
local newest = tonumber(head[2] or '0')
if newest > now then
  now = newest
end
-- The exact token sum of `win`'s entries (pruning keeps it), and when the
-- window keys expire (0: unknown, or `tok` was deleted).
local sum = tonumber(head[1] or '0')
local expires = tonumber(head[3] or '0')

-- Drops what time has ended: leases that ran out (their slots are free),
-- entries that left the window (with their tokens), unsettled permits that
-- may be forgotten. Saves the clock.
local pruned = false
local function prune()
  if pruned then
    return
  end
  pruned = true
  local ended = redis.call('ZREMRANGEBYSCORE', lease, '-inf', s(now))
  if ended > 0 then
    redis.call('HINCRBY', stats, 'leases_expired', ended)
  end
  local edge = s(now - window)
  local old = redis.call('ZRANGEBYSCORE', win, '-inf', edge)
  if #old > 0 then
    local freed = 0
    chunked(old, function(chunk)
      local amounts = redis.call('HMGET', tok, unpack(chunk))
      for i = 1, #chunk do
        freed = freed + tonumber(amounts[i] or '0')
      end
      redis.call('HDEL', tok, unpack(chunk))
    end)
    redis.call('ZREMRANGEBYSCORE', win, '-inf', edge)
    if redis.call('ZCARD', win) == 0 then
      redis.call('DEL', tok)
      sum = 0
      expires = 0
    else
      redis.call('HINCRBY', tok, 'sum', s(-freed))
      sum = sum - freed
    end
  end
  redis.call('ZREMRANGEBYSCORE', open, '-inf', s(now))
  redis.call('HSET', stats, 'clock', s(now))
end

-- -- operations -----------------------------------------------------------------

local function refuse(reason, retry)
  redis.call('HINCRBY', stats, 'refused_' .. reason, 1)
  keep()
  return {0, reason, math.max(retry, 0)}
end

if op == 'acquire' then
  local not_after = ARGV[10]
  if not_after and not_after ~= '' and raw > tonumber(not_after) then
    -- (Rare: its own TTL, as `stats` may be new.)
    redis.call('HINCRBY', stats, 'late_acquires', 1)
    redis.call('PEXPIRE', stats, s(retention))
    return {0, 'late', 0}
  end
  local est = tokens(ARGV[5])
  local rpm = limit(ARGV[6])
  local tpm = limit(ARGV[7])
  local cap = limit(ARGV[8])
  local concurrency_retry = tonumber(ARGV[9])
  -- A number for this call (a refused call leaves a gap). A sequence that
  -- expired restarts above every number it gave (seeded with the time in
  -- us), so a stale permit never names a new one.
  local number = redis.call('INCR', seq)
  local fresh = number == 1
  if fresh then
    redis.call('SET', seq, s(now))
    number = redis.call('INCR', seq)
  end
  if number % 64 == 0 then
    prune()
  end
  if rpm then
    if rpm <= 0 then
      return refuse('rpm', window)
    end
    local used = redis.call('ZCARD', win)
    if used + 1 > rpm and not pruned then
      prune()
      used = redis.call('ZCARD', win)
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
    if sum + est > tpm then
      prune() -- (once) then the sum without what aged out
    end
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
    local live = redis.call('ZCOUNT', lease, '-inf', '(+inf')
    if live >= cap and not pruned then
      prune()
      live = redis.call('ZCOUNT', lease, '-inf', '(+inf')
    end
    if live >= cap then
      local retry = concurrency_retry
      if live > 0 then
        local e = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
        retry = math.min(retry, tonumber(e[2]) - now)
      end
      return refuse('concurrency', retry)
    end
  end
  -- Granted.
  local n = s(number)
  redis.call('ZADD', win, s(now), n)
  -- Every entry has left the window one window after the newest one: the
  -- window keys live between that and one second more, refreshed about
  -- once a second rather than on every call. When they expire is kept in
  -- `tok` (Redis TIME of the refresh plus the time to live), so finding
  -- out costs no call.
  local window_ms = math.ceil(window / 1000) + 1000
  local fields = {n, s(est), 'newest', s(now)}
  if sum + est < exact then
    fields[#fields + 1] = 'sum'
    fields[#fields + 1] = s(sum + est)
  else
    -- Past 2^53 a double rounds: Redis' integer arithmetic keeps the sum
    -- exact (see settle).
    redis.call('HINCRBY', tok, 'sum', s(est))
  end
  local refresh = expires - raw < window_ms * 1000
  if refresh then
    fields[#fields + 1] = 'expires'
    fields[#fields + 1] = s(raw + (window_ms + 1000) * 1000)
  end
  redis.call('HSET', tok, unpack(fields))
  if refresh then -- after the HSET: `tok` may be new
    redis.call('PEXPIRE', win, s(window_ms + 1000))
    redis.call('PEXPIRE', tok, s(window_ms + 1000))
  end
  -- Each ZADD answers 2 when it added the marker too: the key is new.
  local added = redis.call('ZADD', lease, s(now + lease_len), n,
                           '+inf', marker)
                + redis.call('ZADD', open, s(now + math.max(lease_len, window)),
                             n, '+inf', marker)
  redis.call('HINCRBY', stats, 'acquired', 1)
  -- The long-lived keys' retention (a day or more) is set when the sequence
  -- starts or `lease` or `open` is new, and refreshed every 32nd number and
  -- by status.
  if fresh or added > 2 or number % 32 == 1 then
    keep()
  end
  return {1, n}
end

if op == 'status' then
  prune()
  keep()
  local c = redis.call('HMGET', stats, 'acquired', 'settled', 'released',
                       'refused_rpm', 'refused_tpm', 'refused_concurrency',
                       'leases_expired', 'both')
  local out = {redis.call('ZCARD', win),
               tonumber(redis.call('HGET', tok, 'sum') or '0'),
               redis.call('ZCOUNT', lease, '-inf', '(+inf')}
  local both = tonumber(c[8] or '0')
  for i = 1, 7 do
    local x = tonumber(c[i] or '0')
    if i == 2 or i == 3 then
      x = x + both
    end
    out[#out + 1] = x
  end
  return out
end
