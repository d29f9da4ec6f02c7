// The chat page at / in a real browser: headless Chromium (the Debian
// package) driven by puppeteer-core. Loads the page, sends a message and
// sees the answer stream in, stops a long answer and checks through
// /metrics that the server cancelled it, reloads and finds the
// conversation kept, checks that Markdown is rendered without ever turning
// text into markup, asks for the API key on a 401, and saves light and dark
// screenshots (their paths are printed).
// Run: POWER_BIN=... POWER_SHARED_DIR=... node --test ui.browser.mjs
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import puppeteer from 'puppeteer-core';

import { metrics, sleep, startServer, withTimeout } from './lib.mjs';

const T = { timeout: 120000 };
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';

async function launch(profile) {
  if (!existsSync(CHROMIUM)) throw new Error(`Chromium not found at ${CHROMIUM} (Debian package chromium; scripts/install-deps.sh installs it)`);
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 30000,
  });
}

/** Polls fn until it returns a truthy value (bounded by ms). */
async function until(fn, ms, what) {
  const t0 = Date.now();
  for (let i = 0; Date.now() - t0 < ms && i < 10000; i++) {
    const v = await fn();
    if (v) return v;
    await sleep(50);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

const answers = (page) => page.$$eval('#log .msg.assistant .body', (els) => els.map((e) => e.textContent));

describe('chat page in headless Chromium', () => {
  let srv;
  let browser;
  let page;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'power-ui-'));
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--parallel', '2'], env: { POWER_API_KEYS: null } });
    browser = await launch(path.join(dir, 'profile'));
    page = await browser.newPage();
    await page.setViewport({ width: 1000, height: 760 });
  });
  after(async () => {
    await browser?.close();
    const r = await srv?.stop();
    if (dir) rmSync(path.join(dir, 'profile'), { recursive: true, force: true });
    if (r) assert.equal(r.code, 0);
  });

  it('loads, lists the model and streams an answer', T, async () => {
    const resp = await page.goto(srv.url + '/', { waitUntil: 'load', timeout: 20000 });
    assert.equal(resp.status(), 200);
    assert.match(resp.headers()['content-security-policy'], /default-src 'self'/);
    await until(() => page.$eval('#model', (s) => s.value), 10000, 'the model list');
    assert.equal(await page.$eval('#model', (s) => s.value), srv.modelId);
    await page.$eval('#max_tokens', (el) => { el.value = '24'; el.dispatchEvent(new Event('change')); });
    await page.$eval('#temperature', (el) => { el.value = '0'; el.dispatchEvent(new Event('change')); });
    await page.type('#prompt', 'Hello <img src=x onerror="window.pwned=1"> there');
    await page.keyboard.press('Enter');
    const first = await until(async () => (await answers(page))[0], 20000, 'streamed text');
    assert.ok(first.length > 0);
    await until(() => page.$eval('#send', (b) => !b.disabled), 30000, 'the answer to end');
    const stats = await page.$eval('#log .msg.assistant .stats', (e) => e.textContent);
    assert.match(stats, /TTFT \d+ ms/);
    assert.match(stats, /tokens\/s/);
    const user = await page.$eval('#log .msg.user .body', (e) => e.innerHTML);
    assert.ok(!/<img/i.test(user) && /&lt;img/.test(user), 'user text is text, not markup');
    assert.equal(await page.evaluate(() => window.pwned), undefined);
  });

  it('stop ends a long answer and the server cancels it', T, async () => {
    const before = await metrics(srv);
    await page.$eval('#max_tokens', (el) => { el.value = '4000'; el.dispatchEvent(new Event('change')); });
    await page.type('#prompt', 'Write a very long story.');
    await page.keyboard.press('Enter');
    const a = await until(async () => { const t = (await answers(page))[1]; return t && t.length > 10 ? t : null; }, 20000, 'the long answer to start');
    const b = await until(async () => { const t = (await answers(page))[1]; return t && t.length > a.length ? t : null; }, 20000, 'more streamed text');
    assert.ok(b.startsWith(a), 'the text grows as tokens stream in');
    assert.equal(await page.$eval('#stop', (x) => x.disabled), false);
    await page.click('#stop');
    await until(() => page.$eval('#status', (s) => s.textContent === 'Stopped'), 10000, 'the page to say Stopped');
    const m = await until(async () => {
      const x = await metrics(srv);
      return x.power_requests_cancelled_total > (before.power_requests_cancelled_total ?? 0) && x.power_active_sequences === 0 ? x : null;
    }, 15000, 'the server to cancel the request');
    assert.ok(m.power_client_disconnects_total > (before.power_client_disconnects_total ?? 0));
    const stats = await page.$eval('#log .msg.assistant:last-child .stats', (e) => e.textContent);
    assert.match(stats, /stopped/);
  });

  it('a reload keeps the conversation', T, async () => {
    const was = await answers(page);
    const users = await page.$$eval('#log .msg.user .body', (els) => els.map((e) => e.textContent));
    await page.reload({ waitUntil: 'load', timeout: 20000 });
    await until(() => page.$$eval('#log .msg', (els) => els.length === 4), 10000, 'the restored conversation');
    assert.deepEqual(await answers(page), was);
    assert.deepEqual(await page.$$eval('#log .msg.user .body', (els) => els.map((e) => e.textContent)), users);
    assert.equal(await page.$eval('#max_tokens', (e) => e.value), '4000', 'settings kept too');
  });

  it('Markdown is rendered into elements, never from markup', T, async () => {
    const html = await page.evaluate(() => {
      const d = document.createElement('div');
      renderMarkdown('# Title\n**bold** and `x < y` <script>window.pwned=2</script>\n\n- one\n- two\n\n```js\nconst a = "<b>";\n```\n[ok](https://example.org) [bad](javascript:alert(1))', d);
      return d.innerHTML;
    });
    assert.match(html, /<h3>Title<\/h3>/);
    assert.match(html, /<strong>bold<\/strong>/);
    assert.match(html, /<code>x &lt; y<\/code>/);
    assert.match(html, /&lt;script&gt;/);
    assert.match(html, /<ul><li>one<\/li><li>two<\/li><\/ul>/);
    assert.match(html, /<pre aria-label="js code"><code class="language-js">const a = "&lt;b&gt;";<\/code><\/pre>/);
    assert.match(html, /<a href="https:\/\/example.org\/?" rel="noopener noreferrer" target="_blank">ok<\/a>/);
    assert.ok(!/javascript:/.test(html.replace('[bad](javascript:alert(1))', '')), 'no javascript: link');
    assert.equal(await page.evaluate(() => window.pwned), undefined);
  });

  it('screenshots in the light and the dark theme', T, async () => {
    const shots = [];
    for (const scheme of ['light', 'dark']) {
      await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: scheme }]);
      const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      assert.equal(bg, scheme === 'light' ? 'rgb(255, 255, 255)' : 'rgb(19, 20, 23)');
      const file = path.join(dir, `power-chat-${scheme}.png`);
      await page.screenshot({ path: file, fullPage: false });
      assert.ok(existsSync(file));
      shots.push(file);
    }
    for (const f of shots) console.log(`screenshot: ${f}`);
  });
});

describe('chat page asks for the API key', () => {
  let srv;
  let browser;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'power-ui-key-'));
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', env: { POWER_API_KEYS: 'sk-page' } });
    browser = await launch(path.join(dir, 'profile'));
  });
  after(async () => {
    await browser?.close();
    const r = await srv?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (r) assert.equal(r.code, 0);
  });

  it('a 401 opens the key dialog; the key then lists the models', T, async () => {
    const page = await browser.newPage();
    await page.goto(srv.url + '/', { waitUntil: 'load', timeout: 20000 });
    await until(() => page.$eval('#key-dialog', (d) => d.open), 10000, 'the key dialog');
    await page.type('#key-input', 'sk-page');
    await page.click('#key-ok');
    await withTimeout(until(() => page.$eval('#model', (s) => s.value), 10000, 'the model list'), 15000, 'models');
    assert.equal(await page.$eval('#model', (s) => s.value), srv.modelId);
  });
});
