// Whether the API refuses context_management in threads is unverified
// (400 thread_unsupported_request). The SDK's tool runner, threads on (its
// default), runs a multi-turn agent with memory in the proxy against a fake
// that takes edits in threads and one that refuses them, under both
// context_management.threads settings: every run finishes, no memory result
// is lost, and every request that reached the model carried the edits.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import { startHarness, text, toolUse, memory, usage } from '../lib/harness.mjs';

// By conversation position (the fake's turns), which works threaded and not:
// the client's own tool first, then a memory call ctxproxy runs, then the answer.
const session = [
  { content: [text('Checking.'), toolUse('', 'get_weather', { city: 'Paris' })], usage: usage(100, 10) },
  { content: [memory({ command: 'create', path: '/memories/city.md', file_text: 'Paris\n' })], usage: usage(200, 20) },
  { content: [text('Sunny in Paris; I noted your city.')], usage: usage(300, 30) },
];

const cases = [
  { setting: 'pass', key: 'agent', strict: false, refusals: 0, threaded: true },
  { setting: 'pass', key: 'agent', strict: true, refusals: 1, threaded: false },
  { setting: 'unthread_edits', key: 'unthread', strict: false, refusals: 0, threaded: false },
  { setting: 'unthread_edits', key: 'unthread', strict: true, refusals: 0, threaded: false },
];

for (const stream of [false, true]) {
  describe(`tool runner when threads refuse edits (${stream ? 'streaming' : 'not streaming'})`, () => {
    for (const c of cases) {
      test(`threads: ${c.setting}, ${c.strict ? 'strict' : 'lenient'} API`, async () => {
        const h = await startHarness();
        try {
          await h.control('POST', '/_fake/options', { threads_refuse: c.strict ? ['context_management'] : [] });
          await h.turns(...session);
          let ran = 0;
          const getWeather = betaTool({
            name: 'get_weather',
            description: 'Current weather of a city',
            inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
            run: async ({ city }) => {
              ran++;
              return `sunny in ${city}`;
            },
          });
          const client = new Anthropic({ baseURL: h.proxyURL, apiKey: h.keys[c.key] });
          const runner = client.beta.messages.toolRunner({
            model: 'claude-sonnet-4-5',
            max_tokens: 1024,
            messages: [{ role: 'user', content: 'I live in Paris. Weather?' }],
            tools: [getWeather],
            ...(stream ? { stream: true } : {}),
          });
          for await (const item of runner) {
            if (stream) await item.finalMessage();
          }
          const final = await runner;
          assert.equal(final.content.at(-1).text, 'Sunny in Paris; I noted your city.');
          assert.equal(ran, 1, 'get_weather ran once');
          assert.deepEqual(await h.memoryFiles(c.key), { 'city.md': 'Paris\n' }, 'no memory result lost');
          const reqs = await h.requests();
          const refused = reqs.filter((r) => r.status === 400);
          const served = reqs.filter((r) => r.status !== 400);
          assert.equal(refused.length, c.refusals, 'upstream refusals');
          for (const r of refused) assert.equal(r.error?.details?.error_code, 'thread_unsupported_request');
          assert.equal(served.length, 3, 'get_weather round, memory round, answer');
          for (const r of served) {
            assert.equal(r.status, 200);
            assert.ok(Array.isArray(r.body.context_management?.edits), `edits in force: ${JSON.stringify(r.body)}`);
            assert.equal(Boolean(r.thread), c.threaded, `thread ${r.thread}`);
          }
        } finally {
          await h.stop();
        }
      });
    }
  });
}
