// The API's cache diagnosis ctxproxy asks for (accounting.cache_diagnostics) never reaches the
// client. The same conversation goes through a tenant that asks (cacheAsks) and one that does
// not (cacheQuiet), both clearing old tool results, against the fake with its prompt cache on;
// what the SDK hands the client must be the same but for the reply ids. The system prompt
// changes on the fourth call, so that the API has a diagnosis (system_changed) to hide.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startHarness, text, toolUse } from '../lib/harness.mjs';

const model = 'claude-sonnet-4-5';
const calls = 5;

// By conversation position: a call of the tool "read" each turn, with an id of its own.
const turns = Array.from({ length: calls }, (_, n) => ({
  content: [text(`step ${n}`), toolUse(`toolu_cache_${n}`, 'read', { step: String(n) })],
}));

/** conversation is an SDK client resending its whole history with automatic caching. */
function conversation(h, key, stream) {
  const client = new Anthropic({ baseURL: h.proxyURL, apiKey: h.keys[key], maxRetries: 0 });
  const c = {
    system: 'You are a careful agent.',
    history: [{ role: 'user', content: [{ type: 'text', text: 'same' }] }],
    got: [], // per call what the SDK handed over: the message, or each event and the final message
    async call() {
      const params = {
        model,
        max_tokens: 1024,
        system: [{ type: 'text', text: c.system }],
        messages: c.history,
        cache_control: { type: 'ephemeral' },
      };
      let msg;
      if (stream) {
        const s = client.beta.messages.stream(params);
        const events = [];
        for await (const ev of s) events.push(JSON.stringify(ev));
        msg = await s.finalMessage();
        c.got.push(events.join('\n') + '\n' + JSON.stringify(msg));
      } else {
        msg = await client.beta.messages.create(params);
        c.got.push(JSON.stringify(msg));
      }
      const use = msg.content.find((b) => b.type === 'tool_use');
      assert.ok(use, `a reply without a tool use: ${c.got.at(-1)}`);
      c.history.push(
        { role: 'assistant', content: msg.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'x'.repeat(4000) }] },
      );
    },
  };
  return c;
}

const ids = (s) => s.replace(/msg_[A-Za-z0-9_]+/g, 'msg_X');

for (const stream of [false, true]) {
  describe(`cache diagnostics ctxproxy asks for (${stream ? 'streaming' : 'not streaming'})`, () => {
    test('the SDK gets the bytes it would have got without them', async () => {
      const h = await startHarness();
      try {
        await h.control('POST', '/_fake/options', { cache: 'on', min_tokens: { [model]: 1 } });
        await h.turns(...turns);
        const asks = conversation(h, 'cacheAsks', stream);
        const quiet = conversation(h, 'cacheQuiet', stream);
        for (let i = 0; i < calls; i++) {
          for (const c of [asks, quiet]) {
            if (i === 3) c.system = 'You are a hasty agent.';
            await c.call();
          }
        }
        for (let i = 0; i < calls; i++) {
          assert.equal(ids(asks.got[i]), ids(quiet.got[i]), `call ${i + 1}: what the SDK got with cache_diagnostics and without`);
        }
        assert.match(asks.got[3], /"diagnostics":null/, 'call 4 has diagnostics: null');

        // The test means something only if ctxproxy asked, naming the previous reply after the
        // first call, and the API had a diagnosis to hide.
        const reqs = await h.requests();
        const asked = reqs.filter((r) => r.body.diagnostics !== undefined);
        const named = asked.filter((r) => String(r.body.diagnostics.previous_message_id).startsWith('msg_'));
        assert.equal(asked.length, calls, 'upstream calls that asked the API its diagnosis: the asking tenant\'s');
        assert.equal(named.length, calls - 1, 'of them naming the previous reply');
        // The fourth asking call, sent to the fake again as ctxproxy sent it: the diagnosis it hid.
        const fourth = asked[3];
        const res = await fetch(h.fakeURL + '/v1/messages', {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'anthropic-version': '2023-06-01',
            'anthropic-beta': fourth.betas.join(','),
            'x-api-key': fourth.credential,
          },
          body: JSON.stringify({ ...fourth.body, stream: false }),
        });
        const direct = await res.json();
        assert.equal(res.status, 200, JSON.stringify(direct));
        assert.equal(direct.diagnostics?.cache_miss_reason?.type, 'system_changed', `the API's diagnosis: ${JSON.stringify(direct.diagnostics)}`);
      } finally {
        await h.stop();
      }
    });
  });
}
