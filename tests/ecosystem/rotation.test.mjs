// Secret rotation with an overlap (SPEC §5.4), checked by the official Standard Webhooks
// verifiers, Node's (`standardwebhooks`) and Python's (`standardwebhooks`, through
// verify_standard_webhooks.py), against the collector and deliverer binaries:
//  - during the overlap, a receiver holding either secret verifies webhook-signature, and
//    X-Signature is still made with the previous secret;
//  - once the overlap has ended, only the new secret verifies and X-Signature uses it.
//
// Run by tools/test.sh:
//   HOOKRELAY_BIN_DIR=$(bazel info bazel-bin) HOOKRELAY_SW_PYTHON=<venv>/bin/python node --test
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { Webhook } from 'standardwebhooks';

const BIN_DIR = process.env.HOOKRELAY_BIN_DIR;
const PYTHON = process.env.HOOKRELAY_SW_PYTHON;
const HERE = path.dirname(fileURLToPath(import.meta.url));
const WRITE_KEY = 'wk_rotation';
const WAIT_MS = 30000;

const children = [];
const received = [];  // {body, headers}
let receiver;
let collector;
let dir;

const secret = () => `whsec_${randomBytes(24).toString('base64')}`;

function startProcess(name, args, ready) {
  return new Promise((resolve, reject) => {
    const child = spawn(path.join(BIN_DIR, name), args, { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    const timer = setTimeout(() => reject(new Error(`${name} did not log "${ready}"`)), WAIT_MS);
    child.on('exit', (code) => reject(new Error(`${name} exited with ${code} before "${ready}"`)));
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
      process.stderr.write(`[${path.basename(name)}] ${line}\n`);
      try {
        const entry = JSON.parse(line);
        if (entry.msg === ready) {
          clearTimeout(timer);
          resolve(entry);
        }
      } catch {
        // Not a JSON line: echoed only.
      }
    });
  });
}

async function admin(method, target, body) {
  const r = await fetch(`http://127.0.0.1:${collector.admin_http_port}${target}`, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  assert.equal(r.status, 200, `${method} ${target}: ${text}`);
  return JSON.parse(text);
}

async function track(messageId) {
  const r = await fetch(`http://127.0.0.1:${collector.http_port}/v1/track`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Authorization: `Basic ${Buffer.from(`${WRITE_KEY}:`).toString('base64')}`,
    },
    body: JSON.stringify({ userId: 'u1', event: 'Rotated', messageId }),
  });
  assert.equal(r.status, 200, await r.text());
}

async function delivered(messageId) {
  const deadline = Date.now() + WAIT_MS;
  while (Date.now() < deadline) {
    const found = received.find((r) => JSON.parse(r.body).messageId === messageId);
    if (found) return found;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`${messageId} never reached the receiver`);
}

const headersOf = (r) => ({
  'webhook-id': r.headers['webhook-id'],
  'webhook-timestamp': r.headers['webhook-timestamp'],
  'webhook-signature': r.headers['webhook-signature'],
});

// Whether each official verifier accepts `request` for `key`; both must agree.
function verifies(request, key) {
  let node = true;
  try {
    new Webhook(key).verify(request.body, headersOf(request));
  } catch {
    node = false;
  }
  const py = spawnSync(PYTHON, [path.join(HERE, 'verify_standard_webhooks.py')], {
    input: JSON.stringify({ secret: key, body: request.body, headers: headersOf(request) }),
    encoding: 'utf8',
  });
  assert.ok(py.status === 0 || py.status === 1, `python verifier failed: ${py.stderr}`);
  const python = py.status === 0;
  assert.equal(node, python, `the Node verifier says ${node}, the Python one ${python}: ${py.stdout}`);
  return node;
}

const xSignature = (key, body) => createHmac('sha1', key).update(body).digest('hex');

before(async () => {
  assert.ok(BIN_DIR, 'HOOKRELAY_BIN_DIR must point at bazel-bin');
  assert.ok(PYTHON, 'HOOKRELAY_SW_PYTHON must name a python with standardwebhooks (tools/test.sh)');
  receiver = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      received.push({ body: Buffer.concat(chunks).toString('utf8'), headers: req.headers });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  dir = mkdtempSync(path.join(tmpdir(), 'hookrelay-rotation-'));
  const config = path.join(dir, 'config.yaml');
  writeFileSync(config, `sources:
  - id: shop
    name: Shop
    kind: server
    write_keys: [${WRITE_KEY}]
`);
  collector = await startProcess('collector/collector', [
    `--config=${config}`, `--data_dir=${path.join(dir, 'data')}`, '--grpc_address=127.0.0.1:0',
    '--http_address=127.0.0.1:0', '--metrics_address=127.0.0.1:0',
    '--admin_http_address=127.0.0.1:0',
  ], 'collector serving');
  await startProcess('deliverer/deliverer', [
    `--collector=127.0.0.1:${collector.grpc_port}`, '--metrics_address=127.0.0.1:0',
    '--allow_private_networks',
  ], 'deliverer running');
});

after(() => {
  for (const child of children) child.kill('SIGTERM');
  receiver?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a rotated secret verifies with both secrets during the overlap, then with the new one only',
  async () => {
    const first = secret();
    const second = secret();
    const third = secret();
    await admin('POST', '/admin/v1/destinations', {
      id: 'hooks', sources: ['shop'], enabled: true, sharedSecret: first,
      urls: [{ url: `http://127.0.0.1:${receiver.address().port}/hooks` }],
      options: { standardWebhooks: true },
    });

    await track('before');
    const before = await delivered('before');
    assert.ok(verifies(before, first));
    assert.ok(!verifies(before, second));

    // An hour's overlap: receivers on either secret verify; X-Signature stays on the first.
    let d = await admin('POST', '/admin/v1/destinations/hooks:rotateSecret',
      { sharedSecret: second, overlap: '3600s' });
    assert.ok(d.rotation?.endsAt, JSON.stringify(d));
    await track('during');
    const during = await delivered('during');
    assert.equal(during.headers['webhook-signature'].split(' ').length, 2);
    assert.ok(verifies(during, second), 'the new secret must verify during the overlap');
    assert.ok(verifies(during, first), 'the previous secret must verify during the overlap');
    assert.ok(!verifies(during, third));
    assert.equal(during.headers['x-signature'], xSignature(first, during.body));

    // A one-second overlap: the secret before (the first) stops at once, then the overlap ends.
    d = await admin('POST', '/admin/v1/destinations/hooks:rotateSecret',
      { sharedSecret: third, overlap: '1s' });
    const ends = Date.parse(d.rotation.endsAt);
    assert.ok(ends > Date.now() - 1000, JSON.stringify(d));
    // Wait out the overlap by the clock, then for the read to stop showing it.
    while (Date.now() <= ends) await new Promise((r) => setTimeout(r, ends - Date.now() + 1));
    d = await admin('GET', '/admin/v1/destinations/hooks');
    assert.equal(d.rotation, undefined, JSON.stringify(d));
    await track('after');
    const afterEnd = await delivered('after');
    assert.equal(afterEnd.headers['webhook-signature'].split(' ').length, 1);
    assert.ok(verifies(afterEnd, third), 'the new secret must verify after the overlap');
    assert.ok(!verifies(afterEnd, second), 'the previous secret must not verify after the overlap');
    assert.ok(!verifies(afterEnd, first));
    assert.equal(afterEnd.headers['x-signature'], xSignature(third, afterEnd.body));
  });
