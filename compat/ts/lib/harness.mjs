// Starts the Go harness (fake upstream + ctxproxy on 127.0.0.1 ephemeral
// ports) and scripts the fake over its /_fake/ control endpoints.
//
// The harness binary comes from COMPAT_HARNESS (ts_test.go builds it); without
// it the tests `go run ./harness`, which is slower but needs nothing else.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import * as path from 'node:path';
import * as fs from 'node:fs/promises';

const here = path.dirname(fileURLToPath(import.meta.url));
const tsDir = path.resolve(here, '..'); // compat/ts

/**
 * start runs one harness; call stop() when done (the harness also exits when
 * this process does, because its stdin closes).
 */
export async function startHarness() {
  const bin = process.env.COMPAT_HARNESS;
  const child = bin
    ? spawn(bin, [], { stdio: ['pipe', 'pipe', 'inherit'] })
    : spawn('go', ['run', './harness'], { cwd: tsDir, stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const lines = createInterface({ input: child.stdout });
  const first = await new Promise((resolve, reject) => {
    lines.once('line', resolve);
    child.once('error', reject);
    exited.then(({ code, signal }) => reject(new Error(`harness exited (${code ?? signal}) before it was ready`)));
  });
  const info = JSON.parse(first);
  return new Harness(info, child, exited);
}

class Harness {
  constructor(info, child, exited) {
    this.info = info;
    this.proxyURL = info.proxy;
    this.fakeURL = info.fake;
    this.memoryDir = info.memory_dir;
    this.keys = info.keys;
    this.operatorToken = info.operator_token;
    this.vaultOperatorToken = info.vault_operator_token;
    this.child = child;
    this.exited = exited;
  }

  async stop() {
    this.child.stdin.end();
    const { code, signal } = await this.exited;
    if (code !== 0) throw new Error(`harness exited with ${code ?? signal}`);
  }

  async control(method, route, body) {
    const res = await fetch(this.fakeURL + route, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await res.json();
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  }

  /** reset forgets queued replies, the responder and recorded requests. */
  reset() {
    return this.control('POST', '/_fake/reset');
  }

  /** enqueue appends replies (fakeapi Reply JSON) to the FIFO. */
  enqueue(...replies) {
    return this.control('POST', '/_fake/script', { replies });
  }

  /** turns makes the fake answer by conversation position: turn N when the conversation holds N assistant turns. */
  turns(...turns) {
    return this.control('POST', '/_fake/script', { turns });
  }

  /** requests lists what the fake saw on path (default /v1/messages). */
  requests(path = '/v1/messages') {
    return this.control('GET', `/_fake/requests?path=${encodeURIComponent(path)}`);
  }

  /** memoryFiles maps every file under a tenant's ctxproxy memory folder to its content. */
  memoryFiles(tenant) {
    return readTree(path.join(this.memoryDir, tenant));
  }
}

/** readTree maps each regular file below dir (relative path, "/"-separated) to its content; hidden files are left out. */
export async function readTree(dir) {
  const out = {};
  async function walk(rel) {
    let entries;
    try {
      entries = await fs.readdir(path.join(dir, rel), { withFileTypes: true });
    } catch (err) {
      if (err.code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      if (e.name.startsWith('.')) continue;
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(r);
      else if (e.isFile()) out[r] = await fs.readFile(path.join(dir, r), 'utf8');
    }
  }
  await walk('');
  return out;
}

// Content block builders in the fake's Reply JSON.
export const text = (t) => ({ type: 'text', text: t });
export const thinking = (t, signature) => ({ type: 'thinking', thinking: t, signature });
export const toolUse = (id, name, input) => ({ type: 'tool_use', id, name, input });
export const memory = (input) => ({ type: 'tool_use', id: '', name: 'memory', input });
export const usage = (input_tokens, output_tokens) => ({
  input_tokens,
  output_tokens,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: Math.floor(input_tokens / 10),
});
