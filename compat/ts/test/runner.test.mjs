// The SDK's tool runner with its memory tool helper through ctxproxy:
// memory.mode inject (the client runs memory, ctxproxy adds the tool and keeps
// memory out of context editing), then memory.mode proxy, where the same agent
// carries no memory code at all and ends up with the same files.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import { betaMemoryTool, BetaLocalFilesystemMemoryTool } from '@anthropic-ai/sdk/tools/memory/node';
import { startHarness, readTree, text, memory, usage } from '../lib/harness.mjs';

const model = 'claude-sonnet-4-5';

// The model's side of the session: look, write, correct, answer.
const session = [
  { content: [text('Let me check my memory.'), memory({ command: 'view', path: '/memories' })], usage: usage(100, 10) },
  { content: [memory({ command: 'create', path: '/memories/preferences.md', file_text: '# Preferences\n- tea\n' })], usage: usage(200, 20) },
  { content: [memory({ command: 'str_replace', path: '/memories/preferences.md', old_str: '- tea', new_str: '- green tea' })], usage: usage(300, 30) },
  { content: [memory({ command: 'view', path: '/memories/preferences.md' })], usage: usage(400, 40) },
  { content: [text('Noted: you prefer green tea.')], usage: usage(500, 50) },
];
const wantFiles = { 'preferences.md': '# Preferences\n- green tea\n' };

// A tool of the agent's own, so the runner has a tool set that is not memory.
const getWeather = betaTool({
  name: 'get_weather',
  description: 'Current weather of a city',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  run: async ({ city }) => `sunny in ${city}`,
});

/** The tool_result blocks (content and is_error) the upstream saw, in order, over the whole conversation. */
function toolResults(req) {
  return req.messages
    .filter((m) => m.role === 'user' && Array.isArray(m.content))
    .flatMap((m) => m.content.filter((b) => b.type === 'tool_result'))
    .map((b) => ({ content: b.content, is_error: b.is_error ?? false }));
}

async function runAgent({ baseURL, apiKey, tools, stream, threads }) {
  const client = new Anthropic({ baseURL, apiKey });
  const runner = client.beta.messages.toolRunner({
    model,
    max_tokens: 1024,
    messages: [{ role: 'user', content: 'I prefer green tea. Remember that.' }],
    tools,
    ...(stream ? { stream: true } : {}),
    ...(threads ? {} : { thread: false }),
  });
  const turns = [];
  for await (const item of runner) {
    turns.push(stream ? await item.finalMessage() : item);
  }
  return { final: await runner, turns };
}

/** The runner uses message threads by default (thread: false turns them off): check which way the requests went. */
function assertThreads(reqs, threads) {
  const want = threads ? ['create', ...reqs.slice(1).map(() => 'continue')] : reqs.map(() => '');
  assert.deepEqual(reqs.map((r) => r.thread ?? ''), want);
  if (threads) reqs.slice(1).forEach((r, i) => assert.equal(r.previous_message_id, reqs[i].reply_id, 'continues the previous reply'));
}

for (const [stream, threads] of [[false, true], [true, true], [false, false], [true, false]]) {
  describe(`tool runner with the memory helper (${stream ? 'streaming' : 'not streaming'}, threads ${threads ? 'on (the default)' : 'off'})`, () => {
    test('inject mode: the SDK runs memory, proxy mode: ctxproxy does, with the same files and results', async () => {
      const h = await startHarness();
      const helperDir = await fs.mkdtemp(path.join(os.tmpdir(), 'ctxproxy-compat-memory-'));
      try {
        // 1. inject: the agent brings the SDK's local filesystem memory tool.
        await h.turns(...session);
        const fsTool = await BetaLocalFilesystemMemoryTool.init(helperDir);
        const inject = await runAgent({ baseURL: h.proxyURL, apiKey: h.keys.inject, tools: [betaMemoryTool(fsTool), getWeather], stream, threads });
        assertThreads(await h.requests(), threads);
        assert.equal(inject.final.content.at(-1).text, 'Noted: you prefer green tea.');
        assert.equal(inject.turns.length, 5, 'the runner itself made every memory round trip');
        const injectReqs = await h.requests();
        assert.equal(injectReqs.length, 5);
        for (const r of injectReqs) {
          const memTools = (r.tools ?? []).filter((t) => t.name === 'memory');
          assert.equal(memTools.length, 1, `one memory tool in ${JSON.stringify(r.tools)}`);
          const edits = r.body.context_management?.edits ?? [];
          const clear = edits.find((e) => e.type === 'clear_tool_uses_20250919');
          if (clear) assert.ok(clear.exclude_tools.includes('memory'), JSON.stringify(edits));
        }
        assert.deepEqual(await readTree(path.join(helperDir, 'memories')), wantFiles, "the SDK helper's files");
        assert.deepEqual(await h.memoryFiles('inject'), {}, 'in inject mode ctxproxy stores nothing');
        const injectResults = toolResults(injectReqs.at(-1));

        // 2. proxy: the same agent without any memory code.
        await h.reset();
        await h.turns(...session);
        const proxied = await runAgent({ baseURL: h.proxyURL, apiKey: h.keys.agent, tools: [getWeather], stream, threads });
        assert.deepEqual(proxied.final.content.map((b) => b.type), ['text', 'text']);
        assert.equal(proxied.final.content.at(-1).text, 'Noted: you prefer green tea.');
        assert.equal(proxied.turns.length, 1, 'the client saw one turn');
        assert.ok(!proxied.final.content.some((b) => b.type === 'tool_use'), 'no memory call reached the client');
        assert.equal(proxied.final.usage.output_tokens, 150, 'usage summed over the loop');
        const proxyReqs = await h.requests();
        assert.equal(proxyReqs.length, 5, 'ctxproxy made the memory round trips');
        assertThreads(proxyReqs, threads);

        // Same files on disk, and the model got the same tool results, to the character.
        assert.deepEqual(await h.memoryFiles('agent'), await readTree(path.join(helperDir, 'memories')));
        assert.deepEqual(toolResults(proxyReqs.at(-1)), injectResults);
      } finally {
        await fs.rm(helperDir, { recursive: true, force: true });
        await h.stop();
      }
    });
  });
}
