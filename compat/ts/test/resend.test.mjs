// The TS SDK (1.17.0) resends a non-streamed request whose response body was
// cut part-way, with x-stainless-retry-count 1. In memory proxy mode the first
// attempt already ran the loop and its memory writes: ctxproxy answers the
// resend from what it did, so the model's write happens once and the upstream
// is not called again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import { startHarness, text, memory, usage } from '../lib/harness.mjs';

/**
 * cutter relays TCP to target; on its first connection it passes the
 * response's headers and `keep` bytes of its body, then drops the
 * connection. Later connections pass whole.
 */
async function cutter(target, keep) {
  const { hostname, port } = new URL(target);
  let first = true;
  const server = net.createServer((client) => {
    const cut = first;
    first = false;
    const up = net.connect(Number(port), hostname);
    client.pipe(up);
    if (!cut) {
      up.pipe(client);
    } else {
      let seen = Buffer.alloc(0);
      up.on('data', (chunk) => {
        seen = Buffer.concat([seen, chunk]);
        const end = seen.indexOf('\r\n\r\n');
        if (end < 0 || seen.length < end + 4 + keep) return;
        client.write(seen.subarray(0, end + 4 + keep));
        client.destroy();
        up.destroy();
      });
    }
    client.on('error', () => up.destroy());
    up.on('error', () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

test('a resend of a memory-loop request whose reply was cut does not write memory twice', async () => {
  const h = await startHarness();
  const cut = await cutter(h.proxyURL, 10);
  try {
    await h.turns(
      { content: [memory({ command: 'create', path: '/memories/once.md', file_text: 'written once\n' })], usage: usage(100, 10) },
      { content: [text('Saved.')], usage: usage(200, 20) },
    );
    const client = new Anthropic({ baseURL: cut.url, apiKey: h.keys.agent, maxRetries: 2 });
    const { data: msg, response } = await client.beta.messages
      .create({ model: 'claude-sonnet-4-5', max_tokens: 1024, messages: [{ role: 'user', content: 'Remember this.' }] })
      .withResponse();
    assert.deepEqual(msg.content.map((b) => b.text), ['Saved.']);
    assert.equal(response.headers.get('x-ctxproxy-replayed'), 'true', 'the resend was answered from the first attempt');
    assert.equal((await h.requests()).length, 2, 'the loop ran once: two upstream calls');
    assert.deepEqual(await h.memoryFiles('agent'), { 'once.md': 'written once\n' });
  } finally {
    cut.close();
    await h.stop();
  }
});
