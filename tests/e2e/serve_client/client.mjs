// End-to-end checks of `pgw-actor serve` with the official openai SDK.
// usage: node client.mjs CASE   (env: PGW_URL, PGW_KEY, SIM_URL)
// Prints one JSON line of findings; exits 1 with the reason on failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.PGW_URL;
const simURL = process.env.SIM_URL;
const client = new OpenAI({ baseURL, apiKey: process.env.PGW_KEY ?? 'none', maxRetries: 0, timeout: 20000 });
const hello = [{ role: 'user', content: 'Say hello.' }];
const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } } },
];

function header(err, name) {
  const h = err.headers;
  if (!h) return undefined;
  return typeof h.get === 'function' ? h.get(name) : h[name];
}

/// Assembles streamed tool calls by their `index`, as OpenAI clients do.
function assemble(chunks) {
  const calls = [];
  let finish = null;
  for (const c of chunks) {
    for (const choice of c.choices) {
      if (choice.finish_reason) finish = choice.finish_reason;
      for (const t of choice.delta?.tool_calls ?? []) {
        assert.equal(typeof t.index, 'number', 'every tool-call delta has an index');
        const slot = (calls[t.index] ??= { id: '', name: '', arguments: '' });
        if (t.id) slot.id = t.id;
        if (t.function?.name) slot.name += t.function.name;
        if (t.function?.arguments) slot.arguments += t.function.arguments;
      }
    }
  }
  return { calls, finish };
}

function checkCalls(calls) {
  assert.equal(calls.length, 2, 'two tool calls');
  assert.deepEqual(calls.map((c) => c.name ?? c.function.name), ['get_weather', 'get_time']);
  const args = calls.map((c) => JSON.parse(c.arguments ?? c.function.arguments));
  assert.deepEqual(args, [{ city: 'Paris', unit: 'celsius' }, { zone: 'UTC' }]);
  assert.equal(new Set(calls.map((c) => c.id)).size, 2, 'distinct ids');
}

async function expectError(model, Class, status) {
  try {
    await client.chat.completions.create({ model, messages: hello });
  } catch (err) {
    assert.ok(err instanceof Class, `${err.constructor.name} is a ${Class.name}`);
    assert.equal(err.status, status);
    return { status: err.status, code: err.code, retry_after: header(err, 'retry-after') };
  }
  assert.fail(`${model}: no error`);
}

const cases = {
  // POST /v1/embeddings: float, the SDK's default (it asks for base64 and
  // decodes), explicit base64 (little-endian float32); errors by kind.
  async embeddings() {
    const input = ['alpha', 'beta', 'gamma'];
    const floats = await client.embeddings.create({ model: 'embed', input, encoding_format: 'float' });
    assert.equal(floats.object, 'list');
    assert.deepEqual(floats.data.map((d) => d.index), [0, 1, 2]);
    assert.ok(floats.usage.prompt_tokens > 0, 'prompt tokens counted');
    assert.equal(floats.usage.total_tokens, floats.usage.prompt_tokens);
    const dflt = await client.embeddings.create({ model: 'EMBED', input });
    assert.deepEqual(dflt.data.map((d) => d.embedding), floats.data.map((d) => d.embedding));
    const raw = await client.embeddings.create({ model: 'EMBED', input: 'alpha', encoding_format: 'base64' });
    assert.equal(typeof raw.data[0].embedding, 'string');
    const bytes = new Uint8Array(Buffer.from(raw.data[0].embedding, 'base64'));
    const decoded = Array.from(new Float32Array(bytes.buffer));
    const e404 = await client.embeddings.create({ model: 'NOPE', input }).catch((e) => e);
    assert.ok(e404 instanceof OpenAI.NotFoundError, `${e404.constructor.name}`);
    const chatScope = await client.embeddings.create({ model: 'LLM', input }).catch((e) => e);
    assert.ok(chatScope instanceof OpenAI.BadRequestError, `${chatScope.constructor.name}`);
    assert.match(chatScope.message, /KIND=chat, not embeddings/);
    const embedScope = await client.chat.completions.create({ model: 'EMBED', messages: hello }).catch((e) => e);
    assert.ok(embedScope instanceof OpenAI.BadRequestError, `${embedScope.constructor.name}`);
    assert.match(embedScope.message, /KIND=embedding, not chat/);
    return {
      float: floats.data.map((d) => d.embedding),
      sdk_default: dflt.data.map((d) => d.embedding),
      base64: [decoded],
    };
  },
  async chat() {
    const r = await client.chat.completions.create({ model: 'llm', messages: hello, seed: 7, user: 'u1', stop: ['zzz'] });
    assert.equal(r.object, 'chat.completion');
    assert.ok(r.choices[0].message.content.length > 0);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.ok(r.usage.completion_tokens > 0);
    return { content: r.choices[0].message.content, usage: r.usage };
  },
  async stream() {
    const s = await client.chat.completions.create({ model: 'LLM', messages: hello, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of s) chunks.push(c);
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    const withText = chunks.filter((c) => c.choices[0]?.delta?.content).length;
    assert.ok(withText >= 2, `content in several chunks (${withText})`);
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
    assert.equal(chunks[chunks.length - 2].choices[0].finish_reason, 'stop');
    return { chunks: chunks.length, text };
  },
  // The upstream of NOUSAGE reports no usage: null, not zeros.
  async nousage() {
    const { data: r, response } = await client.chat.completions
      .create({ model: 'NOUSAGE', messages: hello }).withResponse();
    assert.equal(r.usage, null, 'no usage object');
    assert.ok(r.choices[0].message.content.length > 0);
    assert.equal(response.headers.get('x-pgw-usage'), 'unavailable');
    const s = await client.chat.completions.create({ model: 'NOUSAGE', messages: hello, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of s) chunks.push(c);
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
    assert.equal(last.usage, null, 'the usage chunk says unknown');
    return { chunks: chunks.length };
  },
  // Live streaming (issue 13): DRIP streams 8 tokens 150 ms apart.
  async live() {
    const upstreamEnded = async () => {
      const log = await (await fetch(`${simURL}/_sim/log`)).json();
      const r = log.requests.filter((x) => x.model === 'drip').pop();
      return r ? r.ended_ms != null : null;
    };
    const out = {};
    for (const mode of ['live', 'buffered']) {
      const { data, response } = await client.chat.completions
        .create({ model: 'DRIP', messages: hello, stream: true, stream_options: { include_usage: true } },
                { headers: { 'x-pgw-stream-mode': mode } })
        .withResponse();
      const chunks = [];
      let ended = null;
      let text = '';
      for await (const c of data) {
        chunks.push(c);
        const t = c.choices[0]?.delta?.content;
        if (t && ended === null) ended = await upstreamEnded();
        text += t ?? '';
      }
      if (mode === 'live')
        assert.equal(ended, false, 'live: the first token arrived while the upstream was still sending');
      const last = chunks[chunks.length - 1];
      assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
      assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
      assert.equal(chunks[chunks.length - 2].choices[0].finish_reason, 'stop');
      out[mode] = { text, mode: response.headers.get('x-pgw-stream-mode'), source: response.headers.get('x-pgw-source') };
    }
    assert.equal(out.live.mode, 'live');
    assert.equal(out.live.source, 'd');
    assert.ok(out.live.text.length > 0);
    assert.equal(out.live.text, out.buffered.text, 'the same answer either way');
    return out;
  },
  // CUT: its first source cuts the stream after 5 tokens, a healthy one
  // waits behind it.
  async interrupted() {
    const s = await client.chat.completions.create({ model: 'CUT', messages: hello, stream: true });
    let partial = '';
    let err = null;
    try {
      for await (const c of s) partial += c.choices[0]?.delta?.content ?? '';
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof OpenAI.APIError, `an APIError after the partial text (${err})`);
    assert.equal(err.code, 'stream_interrupted');
    assert.match(err.message, /stream_cut/);
    assert.ok(partial.length > 0, 'the partial text came first');
    // Buffered, the same fault fails over transparently.
    const b = await client.chat.completions.create({ model: 'CUT', messages: hello, stream: true },
                                                   { headers: { 'x-pgw-stream-mode': 'buffered' } });
    let whole = '';
    for await (const c of b) whole += c.choices[0]?.delta?.content ?? '';
    assert.ok(whole.length > partial.length, 'buffered: the whole answer');
    return { partial, whole, message: err.message };
  },
  // Structured output through the SDK's parse helper (response_format
  // json_schema, strict): `parsed` is the validated JSON; an answer that
  // never matches is a 502 whose message carries the validator's words.
  async parse() {
    const person = {
      type: 'json_schema',
      json_schema: {
        name: 'person', strict: true,
        schema: { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false },
      },
    };
    const r = await client.chat.completions.parse({ model: 'STRUCT', messages: hello, response_format: person });
    assert.deepEqual(r.choices[0].message.parsed, { name: 'Ada', age: 36 });
    const role = {
      type: 'json_schema',
      json_schema: {
        name: 'staff', strict: true,
        schema: {
          type: 'object',
          properties: { name: { type: 'string' }, role: { enum: ['engineer', 'writer'] }, email: { type: 'string', format: 'email' } },
          required: ['name', 'role', 'email'], additionalProperties: false,
        },
      },
    };
    const err = await client.chat.completions.parse({ model: 'ROLE', messages: hello, response_format: role }).catch((e) => e);
    assert.ok(err instanceof OpenAI.APIError, `${err.constructor.name}: ${err.message}`);
    assert.equal(err.status, 502);
    assert.equal(err.code, 'result_invalid');
    assert.match(err.message, /\/role: Failed to match against any enum values: expected one of "engineer", "writer", found "admin"\./);
    return { parsed: r.choices[0].message.parsed, error: err.message };
  },
  async tools() {
    // Deltas without index upstream (no_index source), normalised by pgw.
    const r = await client.chat.completions.create({ model: 'TOOLS', messages: hello, tools, tool_choice: 'auto', parallel_tool_calls: true });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.content, null);
    checkCalls(r.choices[0].message.tool_calls);
    // The conversation continues with the tool answers.
    const msg = r.choices[0].message;
    const next = await client.chat.completions.create({
      model: 'LLM',
      messages: [...hello, msg, ...msg.tool_calls.map((t) => ({ role: 'tool', tool_call_id: t.id, content: '{"ok":true}' }))],
    });
    assert.ok(next.choices[0].message.content.length > 0);
    return { calls: r.choices[0].message.tool_calls.length };
  },
  async tools_stream() {
    const out = {};
    for (const model of ['TOOLS', 'TOOLS/index0']) {
      const s = await client.chat.completions.create({ model, messages: hello, tools, stream: true });
      const chunks = [];
      for await (const c of s) chunks.push(c);
      const { calls, finish } = assemble(chunks);
      assert.equal(finish, 'tool_calls', `${model}: finish_reason`);
      checkCalls(calls);
      out[model] = calls.length;
    }
    return out;
  },
  async tools_failover() {
    // The first source's arguments are not JSON: result_invalid, next source.
    const { data, response } = await client.chat.completions.create({ model: 'TOOLBAD', messages: hello, tools }).withResponse();
    checkCalls(data.choices[0].message.tool_calls);
    assert.equal(response.headers.get('x-pgw-source'), 'good');
    return { source: response.headers.get('x-pgw-source') };
  },
  async abort() {
    const ac = new AbortController();
    const pending = client.chat.completions.create({ model: 'SLOW', messages: hello, stream: true }, { signal: ac.signal });
    let marker;
    setTimeout(() => {
      ac.abort();
      // A request straight to the simulator marks the abort on its clock.
      marker = fetch(`${simURL}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'ok', messages: hello }),
      });
    }, 400);
    // Live streaming: the headers came with the first token, so the abort
    // lands mid-iteration, which the SDK ends quietly; before the headers
    // it rejects.
    const started = Date.now();
    try {
      const s = await pending;
      for await (const _ of s) { /* drain */ }
    } catch (err) {
      assert.ok(err instanceof OpenAI.APIUserAbortError || err.name === 'AbortError', `${err}`);
    }
    assert.ok(ac.signal.aborted && Date.now() - started < 4000, 'the stream ended at the abort');
    while (!marker) await new Promise((r) => setTimeout(r, 5));
    await marker;
    // Wait until the simulator saw the upstream connection close.
    let slow, mark;
    for (let i = 0; i < 100 && !slow; ++i) {
      const log = await (await fetch(`${simURL}/_sim/log`)).json();
      slow = log.requests.find((r) => r.model === 'slow_abort' && r.ended_ms != null);
      mark = log.requests.find((r) => r.model === 'ok');
      if (!slow) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(slow, 'the simulator logged the upstream request');
    assert.ok(mark, 'the simulator logged the marker');
    assert.equal(slow.client_closed, true, 'the upstream connection was closed by pgw');
    const closedAfterAbort = slow.ended_ms - mark.arrived_ms;
    // The answer would take 5 s. Goal: closed within 50 ms of the abort;
    // asserted loosely for loaded (and sanitizer) machines.
    assert.ok(closedAfterAbort < 1000, `upstream closed ${closedAfterAbort} ms after the abort`);
    return { closed_after_abort_ms: closedAfterAbort, upstream_ms: slow.ended_ms - slow.arrived_ms };
  },
  async errors() {
    // QUOTA: RPM=1 and ON_QUOTA_FULL=fail, so the second call is refused.
    await client.chat.completions.create({ model: 'QUOTA', messages: hello });
    const e429 = await expectError('QUOTA', OpenAI.RateLimitError, 429);
    assert.equal(e429.code, 'quota_exhausted');
    assert.ok(Number(e429.retry_after) >= 1, 'Retry-After on 429');
    const e503 = await expectError('DOWN', OpenAI.InternalServerError, 503);
    assert.equal(e503.code, 'retry_exhausted');
    assert.ok(Number(e503.retry_after) >= 1, 'Retry-After on 503');
    const e504 = await expectError('HANG', OpenAI.InternalServerError, 504);
    assert.equal(e504.code, 'call_deadline_exceeded');
    const e404 = await expectError('NOPE', OpenAI.NotFoundError, 404);
    assert.equal(e404.code, 'model_not_found');
    const e400 = await client.chat.completions.create({ model: 'LLM', messages: hello, n: 2 }).catch((e) => e);
    assert.ok(e400 instanceof OpenAI.BadRequestError);
    assert.match(e400.message, /only 1 choice/);
    return { e429, e503, e504 };
  },
  async auth() {
    const wrong = new OpenAI({ baseURL, apiKey: 'not-the-key', maxRetries: 0 });
    const err = await wrong.models.list().catch((e) => e);
    assert.ok(err instanceof OpenAI.AuthenticationError, `${err.constructor.name}`);
    assert.equal(err.status, 401);
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert.ok(ids.includes('LLM') && ids.includes('TOOLS/index0'), ids.join(','));
    return { models: ids.length };
  },
};

const name = process.argv[2];
if (!cases[name]) {
  console.error(`unknown case ${name}; one of ${Object.keys(cases).join(', ')}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify({ case: name, ok: true, ...(await cases[name]()) }));
} catch (err) {
  console.log(JSON.stringify({ case: name, ok: false, error: String(err?.stack ?? err) }));
  process.exit(1);
}
