// Browser end-to-end tests of the taskbroker console, in headless Chromium.
//
// Started by scripts/console-e2e.sh, which builds the broker and the example
// worker and passes their paths in TB_BIN and TB_WORKER. This script starts two
// brokers on fresh SQLite databases (one with auth off, one with auth on), seeds
// tasks with the CLI, runs the example worker on the `emails` queue, and drives
// the console. It prints PASS/FAIL per case, then `N passed, M failed`, saves
// screenshots to target/console-e2e/ (or $CONSOLE_SCREENSHOTS), and exits non-zero when a case failed.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const bin = process.env.TB_BIN ?? join(root, 'target/debug/taskbroker');
const workerBin = process.env.TB_WORKER ?? join(root, 'target/debug/examples/worker');
// A worker that holds one long task (the Workers page shows its lease).
const longBin = process.env.TB_LONG_TASK ?? join(root, 'target/debug/examples/long_task');
// The README's screenshots are refreshed with CONSOLE_SCREENSHOTS=docs/img; by default a
// run keeps its own (in target/console-e2e), so a test run leaves the tree as it was.
const shots = join(root, process.env.CONSOLE_SCREENSHOTS || 'target/console-e2e');
const ADMIN_TOKEN = 'e2e-admin-token-0123456789';
const children = [];
const dir = mkdtempSync(join(tmpdir(), 'tb-console-e2e-'));

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function startBroker(name, extra = []) {
  const grpc = await freePort();
  const http = await freePort();
  const args = [
    'serve',
    '--database-url', `sqlite://${join(dir, name)}.db`,
    '--listen', `127.0.0.1:${grpc}`,
    '--metrics-listen', `127.0.0.1:${http}`,
    '--reclaim-interval', '200ms',
    ...extra,
  ];
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  children.push(child);
  const base = `http://127.0.0.1:${http}`;
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch(`${base}/metrics`);
      if (r.ok) return { grpc: `http://127.0.0.1:${grpc}`, base };
    } catch { /* not up yet */ }
    if (child.exitCode !== null) break;
    await sleep(100);
  }
  throw new Error(`broker ${name} did not start:\n${log}`);
}

/** Submits one task with the CLI and returns its id. */
function submit(broker, queue, opts = [], token) {
  const args = ['submit', queue, ...opts, '--addr', broker.grpc];
  const env = { ...process.env, ...(token ? { TASKBROKER_TOKEN: token } : {}) };
  return execFileSync(bin, args, { env, encoding: 'utf8' }).trim();
}

async function eventually(what, check, timeoutMs = 15000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      if (await check()) return;
    } catch (e) { last = e; }
    await sleep(250);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

function expect(cond, message) {
  if (!cond) throw new Error(message);
}

const results = [];
async function test(name, fn) {
  try {
    await fn();
    results.push([name, null]);
    console.log(`PASS ${name}`);
  } catch (e) {
    results.push([name, e]);
    console.log(`FAIL ${name}: ${e.message.split('\n')[0]}`);
  }
}

async function main() {
  mkdirSync(shots, { recursive: true });
  const a = await startBroker('open');
  const tokens = join(dir, 'tokens');
  writeFileSync(tokens, `admin ${ADMIN_TOKEN} ops\n`);
  const b = await startBroker('auth', ['--auth-tokens-file', tokens]);

  // Seed: a task that dies by its deadline before any worker runs.
  const late = submit(a, 'emails', ['--json', '{"to":"late@example.com"}', '--deadline', '1s']);
  for (let i = 1; i <= 8; i++) {
    submit(a, 'emails', ['--json', JSON.stringify({ to: `user${i}@example.com`, subject: 'Welcome', n: i })]);
  }
  submit(a, 'emails', ['--payload', '']);
  submit(a, 'emails', ['--payload', '']);
  const reports = [];
  for (let i = 1; i <= 2; i++) reports.push(submit(a, 'reports', ['--json', `{"report":"weekly-${i}"}`, '--key', `weekly-${i}`, '--meta', `team=team-${i}`]));
  const xss = submit(a, 'reports', ['--payload', '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">']);
  submit(a, 'reports', ['--json', '{"report":"monthly"}', '--delay', '1h']);
  submit(a, 'invoices', ['--json', '{"invoice":42}', '--priority', '5']);
  // A schedule that would fire at 03:00 Berlin time; the tests pause, trigger and resume it.
  execFileSync(bin, ['schedule', 'create', 'nightly-digest', '--cron', '0 3 * * *', '--tz', 'Europe/Berlin',
    '--queue', 'emails', '--json', '{"to":"digest@example.com","subject":"Nightly digest"}',
    '--addr', a.grpc], { encoding: 'utf8' });
  await eventually('the late task to die', async () => {
    const html = await (await fetch(`${a.base}/tasks/${late}`)).text();
    return html.includes('badge dead');
  });
  const worker = spawn(workerBin, [], {
    env: { ...process.env, TASKBROKER_ADDR: a.grpc },
    stdio: 'ignore',
  });
  children.push(worker);

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  const jsErrors = [];
  page.on('pageerror', (e) => jsErrors.push(e.message));
  // A form refused on purpose answers 400, which Chromium logs as an error.
  let expected400 = 0;
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expected400 > 0 && m.text().includes('status of 400')) { expected400 -= 1; return; }
    jsErrors.push(m.text());
  });
  page.on('response', (r) => { if (r.status() === 404) jsErrors.push(`404 ${r.url()}`); });

  // "No ready task" alone is true while the worker still holds its last leases, so
  // the wait is for nothing ready or leased and for the queue page to count the
  // ten finished attempts.
  await eventually('the worker to finish the emails', async () => {
    for (const state of ['ready', 'leased']) {
      const html = await (await fetch(`${a.base}/tasks?queue=emails&state=${state}`)).text();
      if (!html.includes('No tasks match.')) return false;
    }
    const html = await (await fetch(`${a.base}/queues/emails`)).text();
    return /id="chart-hour"[^>]*data-succeeded="8"[^>]*data-failed="2"|id="chart-hour"[^>]*data-failed="2"[^>]*data-succeeded="8"/.test(html);
  }, 30000);

  await test("a queue's charts count its finished attempts, per minute and per hour", async () => {
    // By now the worker has run the emails: 8 succeeded, the 2 empty payloads failed
    // for good (one attempt each); the late task died by its deadline before any attempt.
    await page.goto(`${a.base}/queues/emails`);
    for (const id of ['chart-hour', 'chart-day']) {
      const fig = page.locator(`#${id}`);
      const [ok, bad] = [await fig.getAttribute('data-succeeded'), await fig.getAttribute('data-failed')];
      expect(ok === '8' && bad === '2', `${id}: 8 succeeded and 2 failed, got ${ok} and ${bad}`);
      expect((await fig.locator('figcaption').textContent()).includes('8 succeeded, 2 failed'), `${id} says it in words`);
      const tips = await fig.locator('svg g title').allTextContents();
      const sum = (re) => tips.reduce((n, t) => n + Number(t.match(re)[1]), 0);
      expect(sum(/(\d+) succeeded/) === 8 && sum(/(\d+) failed/) === 2, `${id} bars add up: ${tips}`);
      expect(await fig.locator('rect.ok').count() >= 1 && await fig.locator('rect.bad').count() >= 1, `${id} draws both`);
    }
    await page.locator('section[aria-labelledby=h-throughput]').screenshot({ path: join(shots, 'console-queue-charts.png') });
  });

  await test('the overview loads with live data and refreshes itself', async () => {
    await page.goto(`${a.base}/`);
    const row = page.locator('#queues tr', { has: page.locator('th', { hasText: 'reports' }) });
    expect(await page.locator('#queues th[scope=row]').count() >= 3, 'three queues');
    const readyCell = row.locator('td').nth(0);
    const before = Number((await readyCell.textContent()).replace(/,/g, ''));
    expect(before === 3, `reports has 3 ready tasks, shows ${before}`);
    const emails = page.locator('#queues tr', { has: page.locator('th', { hasText: 'emails' }) });
    expect(/\d+\/h/.test(await emails.textContent()), 'emails shows its throughput');
    await page.evaluate(() => { window.__sameDocument = true; });
    submit(a, 'reports', ['--json', '{"report":"adhoc"}']);
    await eventually('the overview to show the new task', async () =>
      (await readyCell.textContent()).trim() === String(before + 1), 25000);
    expect(await page.evaluate(() => window.__sameDocument === true), 'refreshed without reloading');
    await page.screenshot({ path: join(shots, 'console-overview.png'), fullPage: true });
  });

  await test('tasks filter by queue and state', async () => {
    await page.goto(`${a.base}/tasks`);
    await page.getByLabel('Queue', { exact: true }).fill('reports');
    await page.getByLabel('State').selectOption('ready');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/queue=reports&state=ready/);
    const rows = page.locator('#tasks tbody tr');
    expect(await rows.count() === 4, `4 ready reports tasks, got ${await rows.count()}`);
    for (const text of await rows.allTextContents()) {
      expect(text.includes('reports') && text.includes('ready'), `row ${text}`);
    }
    await page.screenshot({ path: join(shots, 'console-tasks.png'), fullPage: true });
    // A metadata entry narrows it to the one weekly report of team-2.
    await page.getByLabel(/Metadata/).fill('team=team-2');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/meta=team%3Dteam-2/);
    const team = await page.locator('#tasks tbody tr').count();
    expect(team === 1, `one task of team-2, got ${team}`);
  });

  await test('a task opens with payload, attempts and result', async () => {
    await page.goto(`${a.base}/tasks?queue=emails&state=succeeded`);
    await page.locator('#tasks tbody tr a').first().click();
    await page.waitForURL(/\/tasks\/[0-9a-f-]+$/);
    expect((await page.locator('h1').textContent()).includes('succeeded'), 'succeeded badge');
    const payload = await page.locator('#h-payload + nav + pre').textContent();
    expect(payload.includes('"subject": "Welcome"'), `pretty JSON payload: ${payload}`);
    const attempts = await page.locator('#attempts tbody').textContent();
    expect(attempts.includes('succeeded') && attempts.includes('127.0.0.1'), `attempts: ${attempts}`);
    expect((await page.locator('#h-result').count()) === 1, 'result shown');
    await page.getByRole('link', { name: 'Hex' }).click();
    expect((await page.locator('pre.body').first().textContent()).startsWith('00000000'), 'hex view');
    await page.getByRole('link', { name: 'JSON' }).click();
    await page.screenshot({ path: join(shots, 'console-task.png'), fullPage: true });
  });

  await test('a <script> payload is shown as text, not run', async () => {
    await page.goto(`${a.base}/tasks/${xss}`);
    const shown = await page.locator('pre.body').first().textContent();
    expect(shown.includes('<script>window.__xss=1</script>'), `payload text: ${shown}`);
    await sleep(300);
    expect(await page.evaluate(() => window.__xss) === undefined, 'the payload did not run');
  });

  await test('a dead task is requeued from dead letters and runs', async () => {
    await page.goto(`${a.base}/dead`);
    const group = page.locator('#dead tbody tr', { hasText: 'DEADLINE_EXCEEDED' });
    expect(await group.count() === 1, 'a DEADLINE_EXCEEDED group');
    await page.screenshot({ path: join(shots, 'console-dead.png'), fullPage: true });
    await group.getByRole('link', { name: 'Show tasks' }).click();
    await page.locator('#tasks tbody tr a').first().click();
    await page.waitForURL(new RegExp(`/tasks/${late}$`));
    // Its deadline passed: clear it first, or the reaper kills it again at once.
    await page.getByRole('link', { name: /Change priority/ }).click();
    await page.getByLabel(/Deadline/).fill('none');
    await page.getByRole('button', { name: 'Review the change' }).click();
    await page.getByRole('button', { name: 'Apply the change' }).click();
    await page.getByText('Changed.').waitFor();
    await page.getByRole('link', { name: 'Requeue…' }).click();
    expect((await page.locator('h1').textContent()).includes('Requeue this task?'), 'asks first');
    await page.getByRole('button', { name: 'Requeue this task' }).click();
    await page.getByText('Requeued').first().waitFor();
    await eventually('the worker to run it', async () => {
      await page.reload();
      return (await page.locator('h1 .badge').textContent()) === 'succeeded';
    });
    const attempts = await page.locator('#attempts tbody tr').count();
    expect(attempts === 1, `one attempt (it died before running), got ${attempts}`);
  });

  await test('a task page shows its event history, oldest first', async () => {
    await page.goto(`${a.base}/tasks/${late}`);
    const table = page.getByRole('table', { name: 'Events of this task, oldest first' });
    expect(await table.count() === 1, 'a history table named by its caption');
    const headers = await table.locator('thead th[scope=col]').allTextContents();
    expect(headers.join('|') === 'Time (UTC)|Kind|State|Attempt|Worker|Detail', `headers: ${headers}`);
    const kinds = await table.locator('tbody tr td:nth-child(2)').allTextContents();
    const at = (k) => kinds.indexOf(k);
    expect(kinds[0] === 'SUBMITTED' && kinds.at(-1) === 'SUCCEEDED', `kinds: ${kinds}`);
    expect(at('DEAD') > 0 && at('REQUEUED') > at('DEAD') && at('LEASED') > at('REQUEUED'),
      `died, was requeued, then leased: ${kinds}`);
    const leased = await table.locator('tbody tr[data-kind=leased]').last().textContent();
    expect(leased.includes('leased'), `the state after the lease: ${leased}`);
    await table.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, 'console-history.png'), fullPage: true });
  });

  await test('requeue all of an error group shows the count first', async () => {
    await page.goto(`${a.base}/dead`);
    const group = page.locator('#dead tbody tr', { hasText: 'empty payload' });
    await group.getByRole('link', { name: /Requeue all 2/ }).click();
    expect((await page.locator('h1').textContent()) === 'Requeue 2 dead tasks?', 'count first');
    await page.getByRole('button', { name: 'Requeue 2 tasks' }).click();
    await page.getByText('Requeued 2 dead tasks.').waitFor();
  });

  await test('a schedule is paused, triggered (its run is seen) and resumed', async () => {
    await page.goto(`${a.base}/schedules`);
    const row = page.locator('#schedules tbody tr', { hasText: 'nightly-digest' });
    expect((await row.locator('.badge').textContent()) === 'active', 'active');
    expect((await row.textContent()).includes('0 3 * * *'), 'its cron line');
    await row.getByRole('link', { name: 'Pause… nightly-digest' }).click();
    expect((await page.locator('h1').textContent()) === 'Pause this schedule?', 'asks first');
    await page.getByRole('button', { name: 'Pause the schedule' }).click();
    await page.getByText('Paused: nothing fires').waitFor();
    expect((await page.locator('h1 .badge').textContent()) === 'paused', 'paused badge');
    await page.getByRole('link', { name: 'Trigger now…' }).click();
    await page.getByRole('button', { name: 'Make one run now' }).click();
    await page.getByText('Triggered').first().waitFor();
    await eventually('the worker to run the triggered task', async () => {
      await page.reload();
      const run = page.locator('#runs tbody tr').first();
      return (await run.count()) === 1 && (await run.locator('.badge').textContent()) === 'succeeded'
        && (await run.textContent()).includes('trigger');
    });
    await page.getByRole('link', { name: 'Resume…' }).click();
    await page.getByRole('button', { name: 'Resume the schedule' }).click();
    await page.getByText('Resumed.').waitFor();
    expect((await page.locator('h1 .badge').textContent()) === 'active', 'active again');
    await page.screenshot({ path: join(shots, 'console-schedule.png'), fullPage: true });
  });

  await test('a schedule is created from the form, its preview matching PreviewSchedule', async () => {
    await page.goto(`${a.base}/schedules`);
    await page.getByRole('link', { name: 'New schedule…' }).click();
    await page.waitForURL(/\/schedules\/new$/);
    await page.evaluate(() => { window.__sameDocument = true; });
    await page.getByLabel(/^Schedule id/).fill('report-run');
    await page.getByLabel(/^Cron line/).fill('15 */2 * * *');
    await page.getByLabel(/^Time zone/).fill('America/New_York');
    const cli = JSON.parse(execFileSync(bin, ['schedule', 'preview', '--cron', '15 */2 * * *', '--tz', 'America/New_York',
      '-n', '5', '--json', '--addr', a.grpc], { encoding: 'utf8' })).map((t) => Date.parse(t));
    const times = page.locator('#preview-times time');
    const shown = async () => (await times.evaluateAll((ts) => ts.map((t) => t.getAttribute('datetime')))).map((t) => Date.parse(t));
    // The preview follows the typing; it settles on the full spec's fire times.
    await eventually('the preview to show PreviewSchedule\'s 5 fire times',
      async () => JSON.stringify(await shown()) === JSON.stringify(cli));
    expect(await page.evaluate(() => window.__sameDocument === true), 'previewed without reloading');
    await page.getByLabel('Queue', { exact: true }).fill('reports');
    await page.getByLabel(/^Payload/).fill('{"report":"bi-hourly"}');
    await page.getByLabel(/^Priority/).fill('3');
    await page.getByLabel(/^Metadata/).fill('team=ops');
    await page.getByLabel(/^Key of each task/).fill('report-{fire_time}');
    await page.getByLabel(/^Concurrency key/).fill('tenant-a');
    await page.getByLabel(/^Fire times missed/).selectOption('skip');
    await page.screenshot({ path: join(shots, 'console-schedule-form.png'), fullPage: true });
    await page.getByRole('button', { name: 'Create the schedule' }).click();
    await page.waitForURL(/\/schedules\/report-run\?done=create$/);
    await page.getByText('Created.').waitFor();
    const when = await page.locator('#h-when + dl').textContent();
    expect(when.includes('15 */2 * * *') && when.includes('America/New_York') && when.includes('skip'), when);
    const next = Date.parse(await page.locator('#h-when + dl time').nth(0).getAttribute('datetime'));
    expect(next === cli[0], `its next fire ${next} is the preview's first ${cli[0]}`);
    const task = await page.locator('#h-template + dl').textContent();
    expect(task.includes('reports') && task.includes('team') && task.includes('3'), task);
    expect(task.includes('report-{fire_time}') && task.includes('tenant-a'), `key template and concurrency key: ${task}`);
    // Edit: a new cron line, previewed, saved.
    await page.getByRole('link', { name: 'Edit', exact: true }).click();
    await page.getByLabel(/^Cron line/).fill('0 9 * * MON');
    await eventually('the preview to follow the new line', async () =>
      (await page.locator('#preview-times time').count()) === 5
      && new Date(Date.parse(await page.locator('#preview-times time').first().getAttribute('datetime'))).getUTCDay() === 1);
    expect(await page.getByLabel(/^Key of each task/).inputValue() === 'report-{fire_time}', 'the editor shows the key template');
    await page.getByRole('button', { name: 'Save the changes' }).click();
    await page.getByText('Saved').waitFor();
    expect((await page.locator('#h-when + dl').textContent()).includes('0 9 * * MON'), 'the new line is stored');
    expect((await page.locator('#h-template + dl').textContent()).includes('report-{fire_time}'), 'the key template is kept');
  });

  await test("a schedule's payload is filled in from its queue's payload schema", async () => {
    const file = join(dir, 'order.schema.json');
    writeFileSync(file, JSON.stringify({
      type: 'object', required: ['amount'],
      properties: { amount: { type: 'integer' }, currency: { enum: ['EUR', 'USD'] }, rush: { type: 'boolean' } },
    }));
    execFileSync(bin, ['queue', 'update', 'orders', '--payload-schema', file, '--addr', a.grpc], { encoding: 'utf8' });
    await page.goto(`${a.base}/queues/orders`);
    expect((await page.locator('#payload-schema summary').textContent()).includes('bytes'), 'the queue page shows the schema');
    await page.goto(`${a.base}/schedules/new`);
    await page.getByLabel(/^Schedule id/).fill('orders-hourly');
    await page.getByLabel(/^Cron line/).fill('0 * * * *');
    await page.getByLabel('Queue', { exact: true }).fill('orders');
    await page.getByRole('button', { name: 'Preview' }).click();
    await page.getByLabel(/^amount \*/).fill('1250');
    await page.getByLabel(/^currency/).selectOption({ label: 'EUR' });
    expect(await page.locator('textarea[name="payload"]').count() === 0, 'no raw payload textarea');
    await page.screenshot({ path: join(shots, 'console-schedule-payload-fields.png'), fullPage: true });
    await page.getByRole('button', { name: 'Create the schedule' }).click();
    await page.waitForURL(/\/schedules\/orders-hourly\?done=create$/);
    const task = await page.locator('#h-template + dl').textContent();
    // {"amount":1250,"currency":"EUR"}
    expect(task.includes('orders') && task.includes('32 bytes'), task);
  });

  await test('an invalid spec shows one line naming the field and creates nothing', async () => {
    await page.goto(`${a.base}/schedules/new`);
    await page.getByLabel(/^Schedule id/).fill('broken');
    await page.getByLabel('Queue', { exact: true }).fill('reports');
    await page.getByLabel(/^Cron line/).fill('61 * * * *');
    await page.locator('#preview-error').waitFor();
    expect((await page.locator('#preview-error').textContent()).includes('cron'), 'the preview names the field');
    expected400 += 1;
    await page.getByRole('button', { name: 'Create the schedule' }).click();
    const alert = page.getByRole('alert');
    await alert.waitFor();
    const line = await alert.textContent();
    expect(/^schedule\.spec\.cron: /.test(line) && !line.includes('\n'), `one plain line: ${line}`);
    expect(await page.getByLabel(/^Cron line/).inputValue() === '61 * * * *', 'the form keeps what was typed');
    await page.screenshot({ path: join(shots, 'console-schedule-error.png'), fullPage: true });
    const r = await fetch(`${a.base}/schedules/broken`);
    expect(r.status === 404, `nothing created, got ${r.status}`);
  });

  await test('a fresh schedule form shows no validation until something is typed', async () => {
    await page.goto(`${a.base}/schedules/new`);
    await page.locator('#preview-hint').waitFor();
    expect(await page.locator('#preview-error').count() === 0, 'no preview error before input');
    expect(!(await page.locator('main').textContent()).includes('is required'), 'no "is required" before input');
    // Typed into another field of the spec, the empty cron line is named.
    await page.getByLabel(/^Time zone/).fill('Asia/Shanghai');
    await page.locator('#preview-error').waitFor();
    expect((await page.locator('#preview-error').textContent()).includes('spec.cron: is required'), 'named after input');
  });

  await test("a zoned schedule's times show its zone beside UTC, and its runs their error", async () => {
    // 03:00 in Shanghai (UTC+8, no daylight saving) is 19:00 UTC the day before. Its tasks
    // wait in a queue no worker takes, with a 1 s deadline: each run's task dies of it.
    execFileSync(bin, ['schedule', 'create', 'shanghai-digest', '--cron', '0 3 * * *', '--tz', 'Asia/Shanghai',
      '--queue', 'digests-cn', '--json', '{"region":"cn"}', '--deadline-after', '1s', '--addr', a.grpc],
    { encoding: 'utf8' });
    await page.goto(`${a.base}/schedules/shanghai-digest`);
    const next = page.locator('#next-fire');
    const utc = new Date(Date.parse(await next.locator('time').getAttribute('datetime')));
    expect(utc.getUTCHours() === 19 && utc.getUTCMinutes() === 0, `next fire at 19:00 UTC: ${utc.toISOString()}`);
    const zoned = await next.locator('.tz').textContent();
    expect(/ 03:00:00 Asia\/Shanghai\)$/.test(zoned), `the zone's clock beside UTC: ${zoned}`);
    expect((await page.locator('#h-when + dl').textContent()).includes('Next fire (UTC; Asia/Shanghai)'), 'the label names both');
    execFileSync(bin, ['schedule', 'trigger', 'shanghai-digest', '--addr', a.grpc], { encoding: 'utf8' });
    const run = page.locator('#runs tbody tr').first();
    await eventually('the triggered run to die by its deadline, its error shown', async () => {
      await page.reload();
      return (await run.count()) === 1 && (await run.locator('.badge').textContent()) === 'dead'
        && (await run.locator('td.error-text').textContent()).includes('DEADLINE_EXCEEDED');
    });
    const head = await page.locator('#runs thead').textContent();
    expect(head.includes('Last error') && head.includes('Fire time (UTC; Asia/Shanghai)'), head);
    expect((await run.locator('td').first().locator('.tz').count()) === 1, 'the fire time on both clocks');
    await page.screenshot({ path: join(shots, 'console-schedule-zoned.png'), fullPage: true });
  });

  await test('tasks filter by schedule, linked from the schedule', async () => {
    await page.goto(`${a.base}/schedules/nightly-digest`);
    await page.getByRole('link', { name: 'Tasks it made' }).click();
    await page.waitForURL(/\/tasks\?schedule=nightly-digest$/);
    const rows = page.locator('#tasks tbody tr');
    expect(await rows.count() === 1, `one task made, got ${await rows.count()}`);
    expect((await rows.first().textContent()).includes('emails'), 'in its queue');
    await page.goto(`${a.base}/tasks`);
    await page.getByLabel('Schedule').fill('nightly-digest');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/schedule=nightly-digest/);
    expect(await page.locator('#tasks tbody tr').count() === 1, 'the filter form finds it too');
    await page.getByRole('link', { name: 'nightly-digest' }).first().click();
    await page.waitForURL(/\/schedules\/nightly-digest$/);
  });

  await test('dead letters of a group are cancelled after the count', async () => {
    for (let i = 0; i < 2; i++) submit(a, 'faxes', ['--json', `{"fax":${i}}`, '--deadline', '1s']);
    const group = page.locator('#dead tbody tr', { has: page.locator('td', { hasText: /^faxes$/ }) });
    await eventually('the faxes to die by their deadline', async () => {
      await page.goto(`${a.base}/dead`);
      return (await group.count()) === 1 && (await group.textContent()).includes('Cancel all 2');
    });
    await group.getByRole('link', { name: /Cancel all 2/ }).click();
    expect((await page.locator('h1').textContent()) === 'Cancel 2 dead tasks?', 'count first');
    await page.getByRole('button', { name: 'Cancel 2 tasks' }).click();
    await page.getByText('Cancelled 2 dead tasks.').waitFor();
    expect(await group.count() === 0, 'the group is gone');
    await page.goto(`${a.base}/tasks?queue=faxes&state=cancelled`);
    const rows = page.locator('#tasks tbody tr');
    expect(await rows.count() === 2, `2 cancelled faxes, got ${await rows.count()}`);
    expect((await rows.first().textContent()).includes('DEADLINE_EXCEEDED'), 'the reason is kept');
  });

  await test('a task is cancelled after confirmation', async () => {
    await page.goto(`${a.base}/tasks/${reports[0]}`);
    await page.getByRole('link', { name: 'Cancel…' }).click();
    await page.getByRole('button', { name: 'Cancel this task' }).click();
    await page.getByText('Cancelled').first().waitFor();
    expect((await page.locator('h1 .badge').textContent()) === 'cancelled', 'cancelled badge');
  });

  await test('forms are labelled and the page is keyboard reachable', async () => {
    await page.goto(`${a.base}/tasks`);
    const unlabelled = await page.$$eval('input:not([type=hidden]), select',
      (els) => els.filter((e) => !e.labels || e.labels.length === 0).map((e) => e.name));
    expect(unlabelled.length === 0, `unlabelled: ${unlabelled}`);
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement.textContent) === 'Skip to content', 'skip link first');
    await page.keyboard.press('Enter');
    // Following a fragment link completes after the key press returns.
    await page.waitForFunction(() => location.hash === '#main', null, { timeout: 5000 })
      .catch(() => {});
    expect(page.url().endsWith('#main'), 'skip link jumps to the content');
  });

  await test('a limit bucket set from the CLI is listed on the Queues page with its limits', async () => {
    execFileSync(bin, ['bucket', 'set', 'partner-api', '--rate-limit', '20', '--max-concurrent', '5',
      '--addr', a.grpc], { encoding: 'utf8' });
    await page.goto(`${a.base}/queues`);
    const row = page.locator('#bucket-use tbody tr', { has: page.locator('th', { hasText: /^partner-api$/ }) });
    expect(await row.count() === 1, 'the bucket has a row');
    const cells = await row.locator('td').allTextContents();
    expect(cells[0].includes('20') && cells[1].includes('5'), `its limits: ${cells}`);
    expect(await page.getByText('No cooldown is live.').count() === 1, 'no cooldown yet');
    await page.screenshot({ path: join(shots, 'console-buckets.png'), fullPage: true });
  });

  await test('a queue paused from the console stops leasing, and resumed it runs again', async () => {
    await page.goto(`${a.base}/`);
    await page.getByRole('link', { name: 'settings, pause and resume' }).click();
    await page.waitForURL(/\/queues$/);
    const row = page.locator('#queue-settings tbody tr', { has: page.locator('th', { hasText: /^emails$/ }) });
    expect((await row.locator('.badge').textContent()) === 'active', 'emails is active');
    await row.getByRole('link', { name: 'Pause… emails' }).click();
    expect((await page.locator('h1').textContent()) === 'Pause this queue?', 'asks first');
    await page.getByRole('button', { name: 'Pause the queue' }).click();
    await page.getByText('Paused: no task of this queue is leased').waitFor();
    expect((await page.locator('h1 .badge').textContent()) === 'paused', 'paused badge');
    const held = submit(a, 'emails', ['--json', '{"to":"held@example.com"}']);
    await page.goto(`${a.base}/tasks/${held}`);
    const gate = page.locator('#explain li[data-gate=QueuePaused]');
    expect(await gate.count() === 1, 'Explain names the paused queue');
    expect((await gate.textContent()).includes('queue emails is paused'), await gate.textContent());
    await page.screenshot({ path: join(shots, 'console-explain.png'), fullPage: true });
    // Nothing can be awaited for "not leased": the worker long-polls emails all along, so
    // a second is plenty for it to have taken the task had the pause not held it.
    await sleep(1500);
    await page.reload();
    expect((await page.locator('h1 .badge').textContent()) === 'ready', 'still ready while paused');
    await page.getByRole('link', { name: 'Open the queue to resume it' }).click();
    // The limits form: a bad value is refused with one line, and nothing changes.
    await page.getByLabel(/^Max concurrent \(/).fill('many');
    expected400 += 1;
    await page.getByRole('button', { name: 'Save the limits' }).click();
    await page.getByRole('alert').waitFor();
    expect((await page.getByRole('alert').textContent()).startsWith('max concurrent:'), 'one plain line');
    await page.screenshot({ path: join(shots, 'console-queue.png'), fullPage: true });
    await page.getByRole('link', { name: 'Resume…' }).click();
    await page.getByRole('button', { name: 'Resume the queue' }).click();
    await page.getByText('Resumed').waitFor();
    await eventually('the worker to run the held task', async () => {
      await page.goto(`${a.base}/tasks/${held}`);
      return (await page.locator('h1 .badge').textContent()) === 'succeeded';
    });
  });

  await test('a worker appears on the workers page with its lease', async () => {
    const long = submit(a, 'long-jobs', ['--json', '{"items":300}']);
    const lw = spawn(longBin, ['work'], { env: { ...process.env, TASKBROKER_ADDR: a.grpc }, stdio: 'ignore' });
    children.push(lw);
    const row = page.locator('#workers tbody tr', { has: page.locator(`a[href="/tasks/${long}"]`) });
    await eventually('the long task to be leased', async () => {
      await page.goto(`${a.base}/workers`);
      return (await row.count()) === 1;
    });
    expect((await row.textContent()).includes('long-jobs'), 'its queue');
    expect((await row.textContent()).includes('127.0.0.1'), 'its address');
    await page.screenshot({ path: join(shots, 'console-workers.png'), fullPage: true });
    await row.locator('th a').click();
    await page.waitForURL(/\/workers\/[^/]+$/);
    await page.locator(`#leases a[href="/tasks/${long}"]`).click();
    await page.waitForURL(new RegExp(`/tasks/${long}$`));
    expect((await page.locator('h1 .badge').textContent()) === 'leased', 'it runs');
    lw.kill('SIGTERM');
  });

  await test('no page is wider than a 1280-pixel window', async () => {
    const wide = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const p = await wide.newPage();
    const workerLink = await (async () => {
      await p.goto(`${a.base}/workers`);
      const l = p.locator('#workers tbody th a').first();
      return (await l.count()) ? await l.getAttribute('href') : null;
    })();
    const paths = ['/', '/tasks', '/tasks?queue=emails', `/tasks/${xss}`, `/tasks/${late}`, '/dead', '/workers',
      '/queues', '/queues/emails', '/schedules', '/schedules/nightly-digest', '/schedules/nightly-digest/edit',
      '/schedules/new', '/schedules/nightly-digest/pause', ...(workerLink ? [workerLink] : [])];
    for (const path of paths) {
      await p.goto(`${a.base}${path}`);
      const wider = await p.evaluate(() => {
        const out = [];
        const d = document.documentElement;
        if (d.scrollWidth > d.clientWidth) out.push(`the page by ${d.scrollWidth - d.clientWidth}px`);
        for (const el of document.querySelectorAll('.scroll, table, main')) {
          if (el.scrollWidth > el.clientWidth) out.push(`${el.id || el.className || el.tagName} by ${el.scrollWidth - el.clientWidth}px`);
        }
        return out;
      });
      expect(wider.length === 0, `${path}: ${wider.join(', ')}`);
    }
    await p.goto(`${a.base}/queues`);
    await p.screenshot({ path: join(shots, 'console-queues.png'), fullPage: true });
    await wide.close();
  });

  await test('pages fit a phone width', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
    const p = await phone.newPage();
    for (const path of ['/', '/tasks', `/tasks/${xss}`, '/dead', '/workers', '/queues', '/queues/emails', '/schedules',
      '/schedules/nightly-digest', '/schedules/nightly-digest/pause', '/schedules/new']) {
      await p.goto(`${a.base}${path}`);
      const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow <= 0, `${path} is ${overflow}px wider than the screen`);
    }
    await p.goto(`${a.base}/`);
    await p.screenshot({ path: join(shots, 'console-phone.png'), fullPage: true });
    await phone.close();
  });

  await test('with auth on, the console refuses without a token and signs in with one', async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const p = await ctx.newPage();
    await p.goto(`${b.base}/tasks`);
    await p.waitForURL(/\/login\?next=/);
    const refused = await p.evaluate(async () =>
      (await fetch('/dead/requeue', { method: 'POST', body: new URLSearchParams({ queue: 'x' }) })).status);
    expect(refused === 401, `an unsigned POST is refused, got ${refused}`);
    const live = await p.evaluate(async () => (await fetch('/overview/live', { redirect: 'manual' })).type);
    expect(live === 'opaqueredirect', `live data needs sign-in too, got ${live}`);
    await p.getByLabel('Admin token').fill('not-the-token-0000000000');
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByText('That token is not valid.').waitFor();
    await p.screenshot({ path: join(shots, 'console-login.png') });
    await p.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.waitForURL(`${b.base}/tasks`);
    expect((await p.content()).includes('Signed in as ops'), 'signed in');
    const cookies = await ctx.cookies();
    const session = cookies.find((c) => c.name === 'tb_session');
    expect(session && session.httpOnly && session.sameSite === 'Strict', 'HttpOnly, SameSite=Strict session');
    expect(!session.value.includes(ADMIN_TOKEN), 'the cookie is not the token');
    await p.getByRole('button', { name: 'Sign out' }).click();
    await p.waitForURL(/\/login/);
    await ctx.close();
  });

  await test('a page of another origin submits, leases, completes and reads a task with JSON alone', async () => {
    // A small web app on its own origin; the broker allows exactly that origin (CORS) and
    // requires tokens, which the page sends as a bearer header.
    const appPort = await freePort();
    const origin = `http://127.0.0.1:${appPort}`;
    const tokensFile = join(dir, 'json-tokens');
    const PRODUCER = 'e2e-json-producer-0123456789';
    const WORKER = 'e2e-json-worker-0123456789';
    const ADMIN = 'e2e-json-admin-0123456789';
    writeFileSync(tokensFile, `producer ${PRODUCER} shop\nworker ${WORKER} fleet\nadmin ${ADMIN} ops\n`);
    const j = await startBroker('json', ['--auth-tokens-file', tokensFile, '--cors-allowed-origins', origin]);
    const page = `<!doctype html><meta charset="utf-8"><title>JSON app</title><pre id="out">running</pre>
<script>
const tb = ${JSON.stringify(j.grpc)};
async function call(service, method, token, body) {
  const r = await fetch(tb + '/taskbroker.v1.' + service + '/' + method, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token },
    body: JSON.stringify(body),
  });
  const json = await r.json();
  if (!r.ok) throw new Error(method + ': HTTP ' + r.status + ' ' + json.code + ': ' + json.message);
  return json;
}
(async () => {
  const submitted = await call('BrokerService', 'Submit', ${JSON.stringify(PRODUCER)},
    { tasks: [{ queue: 'from-a-page', payload: btoa('hello from a page') }] });
  const id = submitted.results[0].taskId;
  const leased = await call('BrokerService', 'Lease', ${JSON.stringify(WORKER)},
    { workerId: 'page-1', queues: ['from-a-page'], maxTasks: 1 });
  const t = leased.tasks[0];
  await call('BrokerService', 'Complete', ${JSON.stringify(WORKER)},
    { taskId: t.taskId, leaseToken: t.leaseToken, result: btoa('done by a page') });
  const read = await call('AdminService', 'GetTask', ${JSON.stringify(ADMIN)}, { taskId: id });
  let refused;
  try { await call('AdminService', 'GetTask', 'not-a-token-000000000000', { taskId: id }); }
  catch (e) { refused = e.message; }
  document.getElementById('out').textContent = JSON.stringify({
    id, leased: t.taskId, payload: atob(t.payload), state: read.task.state,
    result: atob(read.task.result), refused,
  });
})().catch((e) => { document.getElementById('out').textContent = 'error: ' + e.message; });
</script>`;
    const { createServer: createHttpServer } = await import('node:http');
    const server = createHttpServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(page);
    });
    await new Promise((ok) => server.listen(appPort, '127.0.0.1', ok));
    const ctx = await browser.newContext();
    try {
      const p = await ctx.newPage();
      const pageErrors = [];
      p.on('pageerror', (e) => pageErrors.push(e.message));
      await p.goto(`${origin}/`);
      const out = p.locator('#out');
      await eventually('the page to finish its calls', async () => (await out.textContent()) !== 'running');
      const text = await out.textContent();
      expect(!text.startsWith('error'), text);
      const r = JSON.parse(text);
      expect(r.leased === r.id, `the page leased ${r.leased}, submitted ${r.id}`);
      expect(r.payload === 'hello from a page', `payload ${r.payload}`);
      expect(r.state === 'TASK_STATE_SUCCEEDED', `state ${r.state}`);
      expect(r.result === 'done by a page', `result ${r.result}`);
      expect(/HTTP 401 unauthenticated/.test(r.refused ?? ''), `a wrong token: ${r.refused}`);
      expect(pageErrors.length === 0, pageErrors.join('; '));
      // The same app under another origin (localhost is not 127.0.0.1 to CORS), which the
      // broker does not allow: its calls get no answer the page may read.
      await p.goto(`http://localhost:${appPort}/`);
      await eventually('the other origin to finish', async () => (await out.textContent()) !== 'running');
      const blocked = await out.textContent();
      expect(blocked.startsWith('error: Failed to fetch'), `from a disallowed origin: ${blocked}`);
    } finally {
      await ctx.close();
      server.close();
    }
  });

  await test('no script errors on any page', async () => {
    expect(jsErrors.length === 0, jsErrors.join('; '));
  });

  await browser.close();
}

let crashed = null;
try {
  await main();
} catch (e) {
  crashed = e;
  console.log(`FAIL setup: ${e.message}`);
} finally {
  for (const c of children) c.kill('SIGTERM');
  await sleep(200);
  rmSync(dir, { recursive: true, force: true });
}
const passed = results.filter(([, e]) => !e).length;
const failed = results.length - passed + (crashed ? 1 : 0);
for (const [name, e] of results) {
  if (e) console.log(`\n--- ${name}\n${e.stack}`);
}
if (crashed) console.log(`\n--- setup\n${crashed.stack}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
