// The OpenAI-compatible HTTP door through OpenAI's own Node client (npm `openai` 6, from the
// deploy_npm fixture): models, completions, chat, streaming with usage, n, logprobs, seeds,
// stops, errors as the client raises them (404, 400, 401, 429 after its retries) and an
// aborted stream freeing its sessions.
//
//   node openai_client_test.mjs --server BUILD/server/attnserve-server --node-modules DIR
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
const require = createRequire(join(resolve(args['node-modules']), 'noop.js'));
const { OpenAI } = require('openai');

const servers = [];

// Starts attnserve-server with `flags` and resolves with its HTTP base URL and metrics URL.
function startServer(flags) {
  return new Promise((resolve, reject) => {
    const child = spawn(args.server, ['--port=0', '--http_port=0', '--metrics_port=0',
                                      '--http_host=127.0.0.1', ...flags],
                        { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OMP_NUM_THREADS: '1' } });
    servers.push(child);
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${out}`)), 60000);
    const onData = (d) => {
      out += d;
      const m = out.match(/OpenAI-compatible HTTP on [^\s:]+:(\d+)/);
      const metrics = out.match(/metrics on [^\s:]+:(\d+)/);
      if (m && metrics) {
        clearTimeout(timer);
        resolve({ base: `http://127.0.0.1:${m[1]}/v1`, metrics: `http://127.0.0.1:${metrics[1]}/metrics` });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${out}`)));
  });
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

let base, authBase, metricsUrl;
const client = (options = {}) => new OpenAI({ baseURL: base, apiKey: 'unused', maxRetries: 0, ...options });

test('models.list names the served models', async () => {
  const models = [];
  for await (const m of client().models.list()) models.push(m.id);
  assert.ok(models.includes('mamba') && models.includes('standard'), models.join(','));
});

test('a completion has text, finish_reason length and usage', async () => {
  const r = await client().completions.create({ model: 'mamba', prompt: 'Hello', max_tokens: 6, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(r.usage, { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 });
});

test('chat: the streamed text equals the whole answer, with usage last', async () => {
  const request = { model: 'mamba', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }],
                    max_tokens: 12, seed: 5, temperature: 0.8 };
  const whole = await client().chat.completions.create(request);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  const stream = await client().chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let text = '', role = null, finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3, `${chunks} chunks`);
  assert.equal(role, 'assistant');
  assert.equal(finish, 'length');
  assert.equal(text, whole.choices[0].message.content);
  assert.deepEqual(usage, whole.usage);
});

test('n = 3 forks one prefill: choice 0 is the n = 1 answer with the same seed', async () => {
  const prompt = 'A prompt long enough to be worth computing once. '.repeat(8);
  const three = await client().completions.create({ model: 'hybrid', prompt, max_tokens: 8, n: 3, seed: 11 });
  const one = await client().completions.create({ model: 'hybrid', prompt, max_tokens: 8, n: 1, seed: 11 });
  assert.equal(three.choices.length, 3);
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(three.choices[0].text, one.choices[0].text);
  assert.notEqual(three.choices[1].text, three.choices[2].text);
  assert.equal(three.usage.completion_tokens, 24);
  assert.equal(three.usage.prompt_tokens, one.usage.prompt_tokens);
});

test('seeds: the same seed gives the same text, another seed another', async () => {
  const ask = (seed) => client().completions.create({ model: 'standard', prompt: 'Seeded', max_tokens: 16, temperature: 1, seed });
  const a = await ask(3), b = await ask(3), c = await ask(4);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
});

test('logprobs: chat top_logprobs and completion logprobs', async () => {
  const chat = await client().chat.completions.create({ model: 'mamba', messages: [{ role: 'user', content: 'x' }],
                                                        max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);  // greedy: the most likely
    assert.ok(Array.isArray(t.bytes));
  }
  const completion = await client().completions.create({ model: 'mamba', prompt: 'x', max_tokens: 3, temperature: 0, logprobs: 2 });
  const lp = completion.choices[0].logprobs;
  assert.equal(lp.tokens.length, 3);
  assert.equal(lp.token_logprobs.length, 3);
  assert.ok(lp.top_logprobs.every((t) => Object.keys(t).length <= 2));
  assert.deepEqual(lp.text_offset.length, 3);
});

test('stop strings end the text before the stop, with finish_reason stop', async () => {
  const request = { model: 'mamba', prompt: 'Stop here', max_tokens: 24, temperature: 0, ignore_eos: true };
  const free = (await client().completions.create(request)).choices[0].text;
  const chars = [...free];
  const stop = chars.slice(6, 8).join('');
  assert.ok(!stop.includes('\ufffd'), 'pick a stop of whole characters');
  const stopped = await client().completions.create({ ...request, stop: [stop] });
  assert.equal(stopped.choices[0].text, free.slice(0, free.indexOf(stop)));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
});

// attnserve's extension: session_id "new" opens a session, whose id comes back; a later request
// naming it continues after the prompt and the tokens generated so far, exactly as the whole
// sequence sent at once would.
test('a session over HTTP continues as the whole sequence would', async () => {
  const greedy = { model: 'mamba', max_tokens: 5, temperature: 0, ignore_eos: true, logprobs: 0,
                   return_tokens_as_token_ids: true };
  const ids = (r) => r.choices[0].logprobs.tokens.map((t) => Number(t.replace('token_id:', '')));
  const tokenize = async (text) => (await (await fetch(`${base.replace('/v1', '')}/tokenize`, {
    method: 'POST', body: JSON.stringify({ model: 'mamba', prompt: text, add_special_tokens: false }) })).json()).tokens;
  // Prompts of ids throughout: each request samples by the same rules (a text prompt would
  // sample only ids with text).
  const hello = await tokenize('Hello'), again = await tokenize(' again');
  const first = await client().completions.create({ ...greedy, prompt: hello, session_id: 'new' });
  assert.match(first.session_id, /^[0-9a-f]{32}$/);
  const second = await client().completions.create({ ...greedy, prompt: again, session_id: first.session_id });
  assert.equal(second.session_id, first.session_id);
  const whole = await client().completions.create({ ...greedy, prompt: [...hello, ...ids(first), ...again] });
  assert.deepEqual(ids(second), ids(whole));
  assert.equal(second.choices[0].text, whole.choices[0].text);
  const closed = await fetch(`${base}/sessions/${first.session_id}`, { method: 'DELETE' });
  assert.deepEqual(await closed.json(), { id: first.session_id, object: 'session', deleted: true });
  const twice = await fetch(`${base}/sessions/${first.session_id}`, { method: 'DELETE' });
  assert.equal(twice.status, 404);
});

test('errors as the client raises them: 404 and 400 naming the field', async () => {
  await assert.rejects(client().completions.create({ model: 'no-such-model', prompt: 'x' }),
                       (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(client().completions.create({ model: 'mamba', prompt: 'x', suffix: 'y' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'suffix');
  await assert.rejects(client().chat.completions.create({ model: 'mamba', messages: [{ role: 'user', content: 'x' }],
                                                          response_format: { type: 'json_object' } }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format');
  await assert.rejects(client().completions.create({ model: 'mamba', prompt: 'x', top_p: 0 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_p');
});

test('401 without the right token; the token works', async () => {
  const bad = new OpenAI({ baseURL: authBase, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const good = new OpenAI({ baseURL: authBase, apiKey: 'secret-token', maxRetries: 0 });
  const r = await good.completions.create({ model: 'mamba', prompt: 'x', max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

// Two long generations (4000 tokens: seconds) fill the client's
// --http_max_requests_per_client=2; a third request gets 429 with retry-after: 1, which the
// client retries twice (waiting a second each time) before raising RateLimitError.
test('429 with retry-after, retried by the client', async () => {
  const holders = [0, 1].map(() => client().completions.create(
    { model: 'standard', prompt: 'hold', max_tokens: 4000, ignore_eos: true }));
  await new Promise((r) => setTimeout(r, 300));
  const start = Date.now();
  await assert.rejects(client({ maxRetries: 2 }).completions.create({ model: 'mamba', prompt: 'x', max_tokens: 1 }),
                       (e) => e instanceof OpenAI.RateLimitError && e.status === 429);
  const waited = (Date.now() - start) / 1000;
  assert.ok(waited >= 1.9, `the client waited ${waited} s (two retries after retry-after: 1)`);
  for (const h of await Promise.all(holders)) assert.equal(h.usage.completion_tokens, 4000);
  const after = await client().completions.create({ model: 'mamba', prompt: 'x', max_tokens: 1 });
  assert.equal(after.choices.length, 1);
});

// --max_sessions=3: an n = 3 stream holds every session; aborting it frees them.
test('an aborted n = 3 stream frees its sessions', async () => {
  const holder = new AbortController();
  const stream = await client().completions.create(
    { model: 'standard', prompt: 'three choices', max_tokens: 4000, n: 3, ignore_eos: true, stream: true }, { signal: holder.signal });
  await stream[Symbol.asyncIterator]().next();
  await assert.rejects(client().completions.create({ model: 'mamba', prompt: 'xy', max_tokens: 1, n: 2 }),
                       (e) => e instanceof OpenAI.RateLimitError && /sessions/.test(e.message));
  holder.abort();
  let ok = false;
  for (let i = 0; i < 40 && !ok; ++i) {
    await new Promise((r) => setTimeout(r, 100));
    try {
      const r = await client().completions.create({ model: 'mamba', prompt: 'xy', max_tokens: 1, n: 2 });
      ok = r.choices.length === 2;
    } catch (e) {
      if (!(e instanceof OpenAI.RateLimitError)) throw e;
    }
  }
  assert.ok(ok, 'the sessions were not freed within 4 s of the abort');
});

// Runs last: the requests above are counted under protocol "openai", with the HTTP statuses as
// gRPC code names.
test('requests are counted in attnserve_requests_total{protocol="openai"}', async () => {
  const text = await (await fetch(metricsUrl)).text();
  const count = (labels) => {
    const line = text.split('\n').find((l) => l.startsWith('attnserve_requests_total{') &&
                                               labels.every((x) => l.includes(x)));
    return line ? Number(line.split(' ').pop()) : 0;
  };
  assert.ok(count(['code="OK"', 'protocol="openai"', 'rpc="ChatCompletions"', 'variant="mamba"']) >= 3);
  assert.ok(count(['code="OK"', 'protocol="openai"', 'rpc="Completions"']) >= 5);
  assert.ok(count(['code="NOT_FOUND"', 'protocol="openai"', 'variant="none"']) >= 1);
  assert.ok(count(['code="RESOURCE_EXHAUSTED"', 'protocol="openai"']) >= 1);
  assert.ok(count(['code="CANCELLED"', 'protocol="openai"']) >= 1);
});

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'openai-client-test-'));
  const tokens = join(dir, 'tokens');
  writeFileSync(tokens, `alice: ${createHash('sha256').update('secret-token').digest('hex')}\n`);
  const [a, b] = await Promise.all([
    startServer(['--max_sessions=3', '--http_max_requests_per_client=2', '--max_new_tokens=4000']),
    startServer([`--auth_tokens_file=${tokens}`]),
  ]);
  [base, metricsUrl, authBase] = [a.base, a.metrics, b.base];
  let failed = 0;
  for (const t of tests) {
    const start = Date.now();
    try {
      await t.fn();
      console.log(`ok   ${t.name} (${Date.now() - start} ms)`);
    } catch (e) {
      failed += 1;
      console.log(`FAIL ${t.name}\n${e.stack}`);
    }
  }
  console.log(`${tests.length - failed}/${tests.length} passed`);
  return failed;
}

main().then((failed) => {
  servers.forEach((s) => s.kill('SIGKILL'));
  process.exit(failed ? 1 : 0);
}, (e) => {
  console.error(e);
  servers.forEach((s) => s.kill('SIGKILL'));
  process.exit(1);
});
