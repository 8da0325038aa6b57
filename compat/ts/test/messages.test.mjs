// The official TypeScript SDK through ctxproxy: create, stream().finalMessage(),
// countTokens, errors and retries, for every reply shape.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startHarness, text, thinking, toolUse, memory, usage } from '../lib/harness.mjs';

const model = 'claude-sonnet-4-5';

/** The README's TypeScript snippet: the SDK pointed at ctxproxy, nothing else changed. */
function newClient(baseURL, apiKey, extra = {}) {
  // README:ts-begin
  const client = new Anthropic({
    baseURL, // ctxproxy, e.g. 'http://localhost:8080'
    apiKey, // your Anthropic key, unchanged; ctxproxy picks the tenant by its sha256
  });
  // README:ts-end
  return Object.keys(extra).length ? client.withOptions(extra) : client;
}

const weatherTool = {
  name: 'get_weather',
  description: 'Current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

/** A conversation with three answered get_weather calls, ending in a user turn that says `then`. */
function weatherHistory(then) {
  const msgs = [{ role: 'user', content: 'What is the weather in Paris, Rome and Oslo?' }];
  ['Paris', 'Rome', 'Oslo'].forEach((city, i) => {
    const id = `toolu_hist_${i}`;
    msgs.push({ role: 'assistant', content: [{ type: 'tool_use', id, name: 'get_weather', input: { city } }] });
    msgs.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: `${city} is sunny, 21 degrees. `.repeat(40) }] });
  });
  msgs.at(-1).content.push({ type: 'text', text: then });
  return msgs;
}

const ask = [{ role: 'user', content: 'I prefer green tea. Remember that.' }];
const withThinking = (p) => ({ ...p, thinking: { type: 'enabled', budget_tokens: 1024 } });

// Each shape: the fake's turns, the request params, the upstream calls one
// request makes, memory files ctxproxy must write, and extra checks.
const shapes = [
  {
    name: 'plain text',
    turns: [{ content: [text('Hello! How can I help you today?')], usage: usage(120, 12) }],
    params: { model, max_tokens: 4096, messages: [{ role: 'user', content: 'hi' }] },
    calls: 1,
  },
  {
    name: 'thinking then text',
    turns: [{ content: [thinking('The user greets me; answer briefly.', 'sig_ts_1'), text('Hi there.')], usage: usage(130, 40) }],
    params: withThinking({ model, max_tokens: 4096, messages: [{ role: 'user', content: 'hi' }] }),
    calls: 1,
    check: (m) => assert.deepEqual(m.content[0], { type: 'thinking', thinking: 'The user greets me; answer briefly.', signature: 'sig_ts_1' }),
  },
  {
    name: 'client tool use',
    turns: [{ content: [text('Checking the weather.'), toolUse('toolu_ts_weather', 'get_weather', { city: 'Paris' })], usage: usage(200, 30) }],
    params: { model, max_tokens: 4096, tools: [weatherTool], messages: [{ role: 'user', content: 'Weather in Paris?' }] },
    calls: 1,
    check: (m) => {
      assert.equal(m.stop_reason, 'tool_use');
      assert.deepEqual(m.content[1].input, { city: 'Paris' });
    },
  },
  {
    name: 'memory loop',
    turns: [
      { content: [text('Let me check my memory.'), memory({ command: 'view', path: '/memories' })], usage: usage(100, 10) },
      { content: [memory({ command: 'create', path: '/memories/preferences.md', file_text: '- drinks green tea\n' })], usage: usage(200, 20) },
      { content: [text('Noted: you prefer green tea.')], usage: usage(300, 30) },
    ],
    params: { model, max_tokens: 4096, messages: ask },
    calls: 3,
    files: { 'preferences.md': '- drinks green tea\n' },
    check: (m) => {
      assert.deepEqual(m.content.map((b) => b.text), ['Let me check my memory.', 'Noted: you prefer green tea.']);
      assert.equal(m.usage.input_tokens, 600, 'usage is the sum over the loop');
      assert.equal(m.usage.output_tokens, 60);
    },
  },
  {
    name: 'memory loop with thinking',
    turns: [
      { content: [thinking('Look at my memory first.', 'sig_m1'), memory({ command: 'view', path: '/memories' })], usage: usage(100, 10) },
      {
        content: [thinking('Nothing there; save it.', 'sig_m2'), memory({ command: 'create', path: '/memories/preferences.md', file_text: '- drinks green tea\n' })],
        usage: usage(200, 20),
      },
      { content: [thinking('Saved.', 'sig_m3'), text('Noted: green tea.')], usage: usage(300, 30) },
    ],
    params: withThinking({ model, max_tokens: 4096, messages: ask }),
    calls: 3,
    files: { 'preferences.md': '- drinks green tea\n' },
  },
  {
    name: 'memory call mixed with a client tool',
    turns: [
      {
        content: [
          text('Saving your city, then checking the weather.'),
          memory({ command: 'create', path: '/memories/city.md', file_text: 'Paris\n' }),
          toolUse('toolu_ts_mixed', 'get_weather', { city: 'Paris' }),
        ],
        usage: usage(150, 25),
      },
    ],
    params: { model, max_tokens: 4096, tools: [weatherTool], messages: [{ role: 'user', content: 'I live in Paris. Weather?' }] },
    calls: 1,
    files: { 'city.md': 'Paris\n' },
    check: (m) => {
      assert.equal(m.stop_reason, 'tool_use');
      assert.deepEqual(m.content.map((b) => b.type), ['text', 'tool_use']);
      assert.equal(m.content[1].id, 'toolu_ts_mixed');
    },
  },
  {
    name: 'context editing applied',
    turns: [{ content: [text('Sunny everywhere.')] }],
    params: { model, max_tokens: 4096, tools: [weatherTool], messages: weatherHistory('Summarise.') },
    calls: 1,
    beta: true, // context_management is in the beta types; the non-beta stream does not carry it
    check: (m) => {
      const edits = m.context_management?.applied_edits ?? [];
      assert.equal(edits.length, 1, JSON.stringify(m.context_management));
      assert.equal(edits[0].type, 'clear_tool_uses_20250919');
      assert.equal(edits[0].cleared_tool_uses, 2);
      assert.ok(edits[0].cleared_input_tokens > 0);
    },
  },
];

/** What must agree between the streamed and the non-streamed message (ids differ). */
function comparable(m, { withEdits }) {
  const out = {
    role: m.role,
    model: m.model,
    stop_reason: m.stop_reason,
    stop_sequence: m.stop_sequence ?? null,
    usage: {
      input_tokens: m.usage.input_tokens,
      output_tokens: m.usage.output_tokens,
      cache_creation_input_tokens: m.usage.cache_creation_input_tokens ?? 0,
      cache_read_input_tokens: m.usage.cache_read_input_tokens ?? 0,
    },
    content: m.content,
  };
  if (withEdits) out.context_management = m.context_management ?? null;
  return out;
}

/** The agent's next request after m: m as the assistant turn, then answers to its tool calls. */
function followUp(params, m) {
  const results = m.content
    .filter((b) => b.type === 'tool_use')
    .map((b) => ({ type: 'tool_result', tool_use_id: b.id, content: '12 degrees, cloudy' }));
  return {
    ...params,
    messages: [...params.messages, { role: m.role, content: m.content }, { role: 'user', content: [...results, { type: 'text', text: 'Thanks.' }] }],
  };
}

/** run makes one request of shape through a fresh harness and checks what must hold streamed or not. */
async function run(shape, { stream, beta }) {
  const h = await startHarness();
  try {
    await h.turns(...shape.turns);
    const client = newClient(h.proxyURL, h.keys.agent);
    const api = beta ? client.beta.messages : client.messages;
    let msg;
    if (stream) {
      const events = [];
      const s = api.stream(shape.params);
      s.on('streamEvent', (ev) => events.push(ev.type));
      msg = await s.finalMessage();
      const count = (t) => events.filter((e) => e === t).length;
      assert.equal(count('message_start'), 1, events.join(','));
      assert.equal(count('message_delta'), 1, events.join(','));
      assert.equal(count('message_stop'), 1, events.join(','));
      assert.equal(count('content_block_start'), msg.content.length, events.join(','));
    } else {
      msg = await api.create(shape.params);
    }
    assert.equal((await h.requests()).length, shape.calls, 'upstream calls');
    assert.ok(!msg.content.some((b) => b.type === 'tool_use' && b.name === 'memory'), 'the client never sees a memory call it did not declare');
    if (shape.files) assert.deepEqual(await h.memoryFiles('agent'), shape.files);
    shape.check?.(msg);

    // Sent back unchanged as the next assistant turn, it is a request the upstream accepts.
    await h.reset();
    const next = await api.create(followUp(shape.params, msg), { maxRetries: 0 });
    assert.equal(next.type, 'message');
    const seen = await h.requests();
    assert.equal(seen.length, 1);
    assert.equal(seen[0].status, 200);
    return msg;
  } finally {
    await h.stop();
  }
}

describe('stream().finalMessage() equals create() through ctxproxy', () => {
  for (const shape of shapes) {
    for (const beta of shape.beta ? [true] : [false, true]) {
      test(`${shape.name} (${beta ? 'client.beta.messages' : 'client.messages'})`, async () => {
        const plain = await run(shape, { stream: false, beta });
        const streamed = await run(shape, { stream: true, beta });
        assert.deepEqual(comparable(streamed, { withEdits: beta }), comparable(plain, { withEdits: beta }));
      });
    }
  }
});

describe('client.messages through ctxproxy', () => {
  let h;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.stop();
  });

  test('create reaches the upstream rewritten, with the key and SDK headers unchanged', async () => {
    await h.reset();
    await h.enqueue({ text: 'Hello from upstream.', usage: usage(42, 7) });
    const msg = await newClient(h.proxyURL, h.keys.agent).messages.create({ model, max_tokens: 1024, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(msg.content[0].text, 'Hello from upstream.');
    assert.equal(msg.stop_reason, 'end_turn');
    assert.equal(msg.usage.input_tokens, 42);
    assert.match(msg.id, /^msg_fake_/);
    const [req] = await h.requests();
    const hdr = (k) => req.header[k]?.join(',') ?? '';
    assert.ok(hdr('X-Api-Key') === h.keys.agent || hdr('Authorization') === `Bearer ${h.keys.agent}`, JSON.stringify(req.header));
    assert.match(hdr('Anthropic-Beta'), /context-management-2025-06-27/);
    assert.equal(hdr('X-Stainless-Lang'), 'js');
    assert.ok(hdr('Anthropic-Version'));
    assert.ok(req.body.tools.some((t) => t.type === 'memory_20250818' && t.name === 'memory'), 'memory tool added');
    assert.deepEqual(req.body.context_management.edits[0].exclude_tools, ['memory']);
  });

  test('countTokens goes through with the tenant\'s edits', async () => {
    await h.reset();
    const res = await newClient(h.proxyURL, h.keys.agent).messages.countTokens({ model, tools: [weatherTool], messages: weatherHistory('Summarise.') });
    assert.ok(res.input_tokens > 0);
    assert.ok(res.context_management.original_input_tokens > res.input_tokens, JSON.stringify(res));
    const [req] = await h.requests('/v1/messages/count_tokens');
    assert.equal(req.body.context_management.edits[0].type, 'clear_tool_uses_20250919');
  });

  for (const [status, type] of [
    [400, 'invalid_request_error'],
    [401, 'authentication_error'],
    [429, 'rate_limit_error'],
    [529, 'overloaded_error'],
  ]) {
    test(`a ${status} from upstream is the SDK's error with its status, type and request-id`, async () => {
      await h.reset();
      await h.enqueue({ status, error: { type, message: `scripted ${type}` } });
      const client = newClient(h.proxyURL, h.keys.agent, { maxRetries: 0 });
      const err = await client.messages.create({ model, max_tokens: 1024, messages: [{ role: 'user', content: 'hi' }] }).then(
        () => assert.fail('no error'),
        (e) => e,
      );
      assert.ok(err instanceof Anthropic.APIError, String(err));
      assert.equal(err.status, status);
      assert.equal(err.type, type);
      assert.equal(err.error.error.message, `scripted ${type}`);
      assert.match(err.requestID ?? '', /^req_fake_/);
      assert.equal((await h.requests()).length, 1);
    });
  }

  test("the SDK's own retries on 529 go through", async () => {
    await h.reset();
    const overloaded = { status: 529, error: { type: 'overloaded_error', message: 'Overloaded' }, header: { 'retry-after-ms': '10' } };
    await h.enqueue(overloaded, overloaded, { text: 'third time lucky' });
    const msg = await newClient(h.proxyURL, h.keys.agent).messages.create({ model, max_tokens: 1024, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(msg.content[0].text, 'third time lucky');
    const reqs = await h.requests();
    assert.equal(reqs.length, 3, 'two retries');
    assert.deepEqual(
      reqs.map((r) => r.header['X-Stainless-Retry-Count']?.[0]),
      ['0', '1', '2'],
    );
  });
});
