// The official TypeScript SDK with a ctxproxy key (sk-ctx-…) as its apiKey,
// or as its authToken (Authorization: Bearer): it works unchanged, the
// upstream gets the tenant's own key, and never the ctxproxy key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startHarness, text, usage } from '../lib/harness.mjs';

const model = 'claude-sonnet-4-5';
const params = { model, max_tokens: 256, messages: [{ role: 'user', content: 'hi' }] };

for (const [name, opts] of [
  ['as the apiKey', (key) => ({ apiKey: key })],
  ['as the authToken', (key) => ({ apiKey: null, authToken: key })],
]) {
  test(`a ctxproxy key ${name}: messages, stream, count_tokens and models go upstream with the tenant's key`, async () => {
    const h = await startHarness();
    try {
      const vault = h.keys.vault;
      assert.match(vault, /^sk-ctx-/);
      await h.enqueue({ content: [text('hello, vault')], usage: usage(10, 5) }, { content: [text('streamed')], usage: usage(10, 5) });
      const client = new Anthropic({ baseURL: h.proxyURL, ...opts(vault) });
      const msg = await client.messages.create(params);
      assert.equal(msg.content[0].text, 'hello, vault');
      const streamed = await client.messages.stream(params).finalMessage();
      assert.equal(streamed.content[0].text, 'streamed');
      const counted = await client.messages.countTokens({ model, messages: params.messages });
      assert.ok(counted.input_tokens > 0);
      const models = await client.models.list();
      assert.ok(models.data.length > 0);

      const calls = [...(await h.requests('/v1/messages')), ...(await h.requests('/v1/messages/count_tokens'))];
      assert.equal(calls.length, 3);
      // The client's models list, and ctxproxy's own reads of the tenant's models (at start, with
      // the tenant's key too).
      const modelReads = await h.requests('/v1/models');
      assert.ok(modelReads.length >= 1);
      const seen = [...calls, ...modelReads];
      for (const r of seen) {
        assert.equal(r.credential, h.info.vault_upstream_key, `${r.path} went upstream with the tenant's key`);
        assert.ok(!JSON.stringify(r.header).includes('sk-ctx-'), `the ctxproxy key went upstream on ${r.path}`);
      }
    } finally {
      await h.stop();
    }
  });
}

test('an unknown ctxproxy key is the SDK’s AuthenticationError, and nothing goes upstream', async () => {
  const h = await startHarness();
  try {
    const client = new Anthropic({ baseURL: h.proxyURL, apiKey: 'sk-ctx-not-a-key', maxRetries: 0 });
    await assert.rejects(client.messages.create(params), (err) => {
      assert.ok(err instanceof Anthropic.AuthenticationError, String(err));
      assert.match(err.message, /unknown/);
      return true;
    });
    assert.equal((await h.requests()).length, 0);
  } finally {
    await h.stop();
  }
});
