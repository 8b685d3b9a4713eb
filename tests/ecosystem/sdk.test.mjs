// Real analytics SDKs, with their defaults (only the endpoint changed), against the collector
// binary, a deliverer and a receiver on 127.0.0.1: every call of every type must arrive at the
// receiver. The RudderStack Node SDK sends gzip JSON as application/x-www-form-urlencoded, which
// the collector used to refuse with 415 (and the SDK then dropped the batch silently).
//
// Run by tools/test.sh: HOOKRELAY_BIN_DIR=$(bazel info bazel-bin) node --test
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { after, before, test } from 'node:test';

import { Analytics as SegmentAnalytics } from '@segment/analytics-node';
import RudderAnalytics from '@rudderstack/rudder-sdk-node';

const BIN_DIR = process.env.HOOKRELAY_BIN_DIR;
const WRITE_KEY = 'wk_ecosystem';
const WAIT_MS = 30000;

const children = [];
const received = [];
let receiver;
let collectorHttp;
let dir;

// Starts a binary and resolves with the JSON log line whose msg is `ready` (its ports).
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

async function waitFor(predicate, what) {
  const deadline = Date.now() + WAIT_MS;
  while (Date.now() < deadline) {
    if (predicate()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}; received ${JSON.stringify(received, null, 1)}`);
}

before(async () => {
  assert.ok(BIN_DIR, 'HOOKRELAY_BIN_DIR must point at bazel-bin');
  receiver = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      received.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      res.writeHead(200).end('ok');
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  dir = mkdtempSync(path.join(tmpdir(), 'hookrelay-ecosystem-'));
  const config = path.join(dir, 'config.yaml');
  writeFileSync(config, `sources:
  - id: sdks
    name: SDKs
    kind: server
    write_keys: [${WRITE_KEY}]
destinations:
  - id: receiver
    type: webhooks
    sources: [sdks]
    enabled: true
    urls:
      - url: http://127.0.0.1:${receiver.address().port}/hooks
`);
  const collector = await startProcess('collector/collector', [
    `--config=${config}`, `--data_dir=${path.join(dir, 'data')}`, '--grpc_address=127.0.0.1:0',
    '--http_address=127.0.0.1:0', '--metrics_address=127.0.0.1:0',
    '--admin_http_address=127.0.0.1:0',
  ], 'collector serving');
  collectorHttp = `http://127.0.0.1:${collector.http_port}`;
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

// The six calls every SDK makes, and what the receiver must get for each.
function expectAllTypes(prefix) {
  const byType = (type, userId) => received.find((b) => b.type === type && b.userId === userId);
  const want = [
    ['identify', `${prefix}-1`, (b) => assert.equal(b.traits.plan, 'pro')],
    ['track', `${prefix}-1`, (b) => {
      assert.equal(b.event, 'Order Completed');
      assert.equal(b.properties.total, 42.5);
    }],
    ['page', `${prefix}-1`, (b) => assert.equal(b.name, 'Pricing')],
    ['screen', `${prefix}-1`, (b) => assert.equal(b.name, 'Home')],
    ['group', `${prefix}-1`, (b) => assert.equal(b.groupId, `${prefix}-group`)],
    ['alias', `${prefix}-2`, (b) => assert.equal(b.previousId, `${prefix}-1`)],
  ];
  for (const [type, userId, check] of want) {
    const body = byType(type, userId);
    assert.ok(body, `${prefix}: no ${type} for ${userId}`);
    assert.equal(body.version, 1);
    assert.ok(body.messageId, `${prefix}: ${type} without messageId`);
    check(body);
  }
}

function sendAll(client, prefix) {
  const userId = `${prefix}-1`;
  client.identify({ userId, traits: { plan: 'pro' } });
  client.track({ userId, event: 'Order Completed', properties: { total: 42.5 } });
  client.page({ userId, name: 'Pricing', properties: { path: '/pricing' } });
  client.screen({ userId, name: 'Home' });
  client.group({ userId, groupId: `${prefix}-group`, traits: { name: 'Acme' } });
  client.alias({ userId: `${prefix}-2`, previousId: userId });
}

const countFrom = (prefix) => received.filter((b) => String(b.userId).startsWith(prefix)).length;

// Segment's Node SDK: defaults but the host.
test('@segment/analytics-node delivers every type', async () => {
  const client = new SegmentAnalytics({ writeKey: WRITE_KEY, host: collectorHttp });
  const errors = [];
  client.on('error', (e) => errors.push(e));
  sendAll(client, 'segment');
  await client.closeAndFlush({ timeout: WAIT_MS });
  assert.deepEqual(errors, []);
  await waitFor(() => countFrom('segment') >= 6, 'six segment events');
  expectAllTypes('segment');
});

// RudderStack's Node SDK: defaults (gzip, its HTTP library's default Content-Type) but the
// data plane URL.
test('@rudderstack/rudder-sdk-node delivers every type with its defaults', async () => {
  const client = new RudderAnalytics(WRITE_KEY, { dataPlaneUrl: collectorHttp, logLevel: 'error' });
  sendAll(client, 'rudder');
  await new Promise((resolve, reject) => {
    client.flush((error) => (error ? reject(error) : resolve()));
  });
  await waitFor(() => countFrom('rudder') >= 6, 'six rudder events');
  expectAllTypes('rudder');
});
