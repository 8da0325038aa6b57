// The official TypeScript SDK's memory stores client (client.beta.memoryStores)
// through ctxproxy's operator API, with nothing but the base URL and a
// tenant's operator token as the API key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import { startHarness, memory, text } from '../lib/harness.mjs';

const sha = (s) => createHash('sha256').update(s, 'utf8').digest('hex');
const store = 'memstore_agent';
let h;
before(async () => {
  h = await startHarness();
});
after(async () => {
  await h?.stop();
});

test('memoryStores lists, reads, updates with a precondition, deletes and lists versions', async () => {
  const op = new Anthropic({ baseURL: h.proxyURL, apiKey: h.operatorToken });

  const stores = [];
  for await (const s of op.beta.memoryStores.list()) stores.push(s.id);
  assert.deepEqual(stores, [store], 'a tenant operator token sees its own store only');

  const created = await op.beta.memoryStores.memories.create(store, { path: '/notes/tea.md', content: '- green tea\n' });
  assert.equal(created.content_sha256, sha('- green tea\n'));
  assert.match(created.id, /^mem_/);
  assert.equal((await h.memoryFiles('agent'))['notes/tea.md'], '- green tea\n', 'the memory is the tool\'s file');

  const listed = [];
  for await (const m of op.beta.memoryStores.memories.list(store, { path_prefix: '/notes/' })) listed.push(m);
  assert.deepEqual(listed.map((m) => [m.type, m.id, m.path, m.content]), [['memory', created.id, '/notes/tea.md', null]]);

  const read = await op.beta.memoryStores.memories.retrieve(created.id, { memory_store_id: store });
  assert.equal(read.content, '- green tea\n');

  await assert.rejects(
    op.beta.memoryStores.memories.update(created.id, {
      memory_store_id: store,
      content: '- black tea\n',
      precondition: { type: 'content_sha256', content_sha256: sha('stale') },
    }),
    (err) => err.status === 409 && err.error?.error?.type === 'memory_precondition_failed_error',
  );
  const updated = await op.beta.memoryStores.memories.update(created.id, {
    memory_store_id: store,
    content: '- black tea\n',
    precondition: { type: 'content_sha256', content_sha256: read.content_sha256 },
  });
  assert.equal(updated.id, created.id);
  assert.notEqual(updated.memory_version_id, created.memory_version_id);

  await assert.rejects(
    op.beta.memoryStores.memories.delete(created.id, { memory_store_id: store, expected_content_sha256: read.content_sha256 }),
    (err) => err.status === 409,
  );
  const deleted = await op.beta.memoryStores.memories.delete(created.id, {
    memory_store_id: store,
    expected_content_sha256: updated.content_sha256,
  });
  assert.deepEqual(deleted, { id: created.id, type: 'memory_deleted' });

  const versions = [];
  for await (const v of op.beta.memoryStores.memoryVersions.list(store, { memory_id: created.id, view: 'full' })) versions.push(v);
  assert.deepEqual(
    versions.map((v) => [v.operation, v.content]),
    [['deleted', null], ['modified', '- black tea\n'], ['created', '- green tea\n']],
  );
  for (const v of versions) assert.equal(v.created_by.type, 'service_account_actor');

  await assert.rejects(
    op.beta.memoryStores.memories.retrieve(created.id, { memory_store_id: 'memstore_inject' }),
    (err) => err.status === 404,
    'another tenant\'s store is not found',
  );
});

test('a memory the model wrote is attributed to its key, request and message', async () => {
  await h.reset();
  await h.turns({ content: [memory({ command: 'create', path: '/memories/prefs.md', file_text: 'tea\n' })] }, { content: [text('Noted.')] });
  const client = new Anthropic({ baseURL: h.proxyURL, apiKey: h.keys.agent });
  await client.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 256, messages: [{ role: 'user', content: 'I like tea' }] });
  const op = new Anthropic({ baseURL: h.proxyURL, apiKey: h.operatorToken });
  const page = await op.beta.memoryStores.memoryVersions.list(store, { api_key_id: sha(h.keys.agent).slice(0, 8) });
  const v = page.data.find((x) => x.path === '/prefs.md');
  assert.ok(v, JSON.stringify(page.data));
  assert.equal(v.created_by.type, 'api_actor');
  assert.match(v.created_by.request_id, /^req_/);
  assert.match(v.created_by.upstream_message_id, /^msg_/);
});

test('with memory.scopes, the memory stores client lists the user\'s own store by name and reads what the model wrote there', async () => {
  await h.reset();
  await h.turns(
    { content: [memory({ command: 'create', path: '/memories/notes.md', file_text: 'node\'s notes\n' })] },
    { content: [memory({ command: 'create', path: '/memories/team/x.md', file_text: 'x' })] },
    { content: [text('Noted.')] },
  );
  const client = new Anthropic({ baseURL: h.proxyURL, apiKey: h.keys.vault });
  await client.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 256, messages: [{ role: 'user', content: 'note it' }] });
  const last = (await h.requests('/v1/messages')).at(-1);
  const result = last.messages.at(-1).content[0];
  assert.equal(result.content, 'Error: /memories/team is read-only; ask an operator to change it.');
  assert.equal(result.is_error, true);

  const op = new Anthropic({ baseURL: h.proxyURL, apiKey: h.vaultOperatorToken });
  const stores = [];
  for await (const s of op.beta.memoryStores.list()) stores.push([s.id, s.name]);
  const mine = stores.find(([, name]) => name === 'node');
  assert.ok(mine, JSON.stringify(stores));
  assert.match(mine[0], /^memstore_vault~u-[0-9a-f]{16}$/);
  assert.ok(stores.every(([id]) => id.startsWith('memstore_vault')), 'only the tenant\'s stores');
  const listed = [];
  for await (const m of op.beta.memoryStores.memories.list(mine[0], { view: 'full' })) listed.push([m.path, m.content]);
  assert.deepEqual(listed, [['/notes.md', 'node\'s notes\n']]);
});
