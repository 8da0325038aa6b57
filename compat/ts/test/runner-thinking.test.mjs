// The SDK's tool runner with thinking on, through ctxproxy in memory proxy mode: the model makes
// a memory call in its first round (ctxproxy runs it; the client never sees it), then calls the
// agent's own tool; the runner sends the merged message back with the tool's result. The fake
// binds every thinking block it writes to the conversation before it and refuses a mismatch (as
// the API does by default), so that request is accepted only if the hidden round's thinking
// still matches: it is, with every thinking block kept (none dropped, none refused).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import { startHarness, text, thinking, toolUse, memory, usage } from '../lib/harness.mjs';

// The model's side, by the number of assistant turns the API sees (ctxproxy gives it the hidden
// memory round back when the runner sends the merged message).
const session = [
  { content: [thinking('Note the city first.', 'sig_ts_run_1'), memory({ command: 'create', path: '/memories/city.md', file_text: 'Paris\n' })], usage: usage(100, 10) },
  { content: [thinking('Now the weather.', 'sig_ts_run_2'), toolUse('', 'get_weather', { city: 'Paris' })], usage: usage(200, 20) },
  { content: [thinking('Answer.', 'sig_ts_run_3'), text('Sunny in Paris.')], usage: usage(300, 30) },
];

const thinkings = {
  // claude-opus-4-8's capabilities list between_tools.
  enabled: { model: 'claude-sonnet-4-5', thinking: { type: 'enabled', budget_tokens: 1024 } },
  between_tools: { model: 'claude-opus-4-8', thinking: { type: 'between_tools' } },
};

for (const [kind, { model, thinking: thinkingParam }] of Object.entries(thinkings)) {
  for (const [stream, threads] of [[false, true], [true, true], [false, false], [true, false]]) {
    describe(`tool runner, thinking ${kind} (${stream ? 'streaming' : 'not streaming'}, threads ${threads ? 'on' : 'off'})`, () => {
      test("the runner's next request, with the merged message, is accepted with its thinking kept", async () => {
        const h = await startHarness();
        try {
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
          const client = new Anthropic({ baseURL: h.proxyURL, apiKey: h.keys.agent, maxRetries: 0 });
          const runner = client.beta.messages.toolRunner({
            model,
            max_tokens: 4096,
            thinking: thinkingParam,
            messages: [{ role: 'user', content: 'I live in Paris. Weather?' }],
            tools: [getWeather],
            ...(stream ? { stream: true } : {}),
            ...(threads ? {} : { thread: false }),
          });
          const turns = [];
          for await (const item of runner) turns.push(stream ? await item.finalMessage() : item);
          const final = await runner;
          assert.equal(final.content.at(-1).text, 'Sunny in Paris.');
          assert.equal(ran, 1, 'get_weather ran once');
          assert.equal(turns.length, 2, 'the client saw two turns: the merged one with its tool call, and the answer');
          assert.deepEqual(turns[0].content.map((b) => b.type), ['thinking', 'thinking', 'tool_use'], 'the merged message keeps both rounds\' thinking, not the memory call');
          assert.deepEqual(await h.memoryFiles('agent'), { 'city.md': 'Paris\n' });

          const reqs = await h.requests();
          assert.equal(reqs.length, 3, 'memory round, get_weather round, answer');
          for (const [i, r] of reqs.entries()) {
            assert.equal(r.status, 200, `request ${i}: ${JSON.stringify(r.error)}`);
            assert.deepEqual(r.input_transformations ?? [], [], `request ${i}: no thinking block dropped`);
          }
          // The runner's request with the tool's result: the API saw both earlier rounds' thinking.
          const sigs = reqs[2].messages
            .filter((m) => m.role === 'assistant' && Array.isArray(m.content))
            .flatMap((m) => m.content.filter((b) => b.type === 'thinking').map((b) => b.signature));
          assert.deepEqual(sigs, ['sig_ts_run_1', 'sig_ts_run_2']);
        } finally {
          await h.stop();
        }
      });
    });
  }
}
