// The page `looplm serve` shows at / in a real browser (tests/test_serve.cpp, ServeClients.Page):
// Debian's chromium, headless, driven by puppeteer-core. It types a prompt, sets the looped
// controls, presses Generate and reads the streamed tokens back.
//   node page.mjs CACHE CHROMIUM URL EXPECTED_JSON
// EXPECTED_JSON: {"prompt", "max_tokens", "text": the greedy text, "R": the model's loop steps}.
// Prints one line of JSON; exits 1 naming the first check that failed.
import { createRequire } from 'node:module';

const [cache, chromium, url, expectedJson] = process.argv.slice(2);
const require = createRequire(cache + '/package.json');
const puppeteer = require('puppeteer-core');
const expected = JSON.parse(expectedJson);

function check(ok, what) {
  if (!ok) {
    console.error('failed: ' + what);
    process.exit(1);
  }
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: 'networkidle0' });
  for (const id of ['#prompt', '#generate', '#output', '#threshold']) check(await page.$(id), 'element ' + id);
  // it names the model it serves (from /v1/models, loaded by now: networkidle0)
  check((await page.$eval('#model', (el) => el.textContent)).length > 0, 'the page names the model');

  // fixed rule: every token runs R steps, and the text is the greedy text
  const set = async (id, value) => {
    await page.$eval(id, (el) => { el.value = ''; });
    await page.type(id, String(value));
  };
  await set('#prompt', expected.prompt);
  await set('#max_tokens', expected.max_tokens);
  await set('#temperature', 0);
  await page.select('#exit_rule', 'fixed');
  await page.click('#generate');
  await page.waitForFunction(() => document.querySelector('#summary').textContent.length > 0, { timeout: 60000 });
  const summary = await page.$eval('#summary', (el) => el.textContent);
  check(summary.includes('tokens/s') && summary.includes('loop steps per token') && summary.includes('bytes per position'), 'summary: ' + summary);
  let spans = await page.$$eval('#output span', (s) => s.map((x) => ({ text: x.textContent, steps: Number(x.dataset.steps), bg: x.style.backgroundColor })));
  check(spans.length >= expected.max_tokens / 2, 'a span per streamed token: ' + spans.length);
  check(spans.map((s) => s.text).join('') === expected.text, 'the text: ' + JSON.stringify(spans.map((s) => s.text).join('')));
  check(spans.every((s) => s.steps === expected.R), 'every token at R steps');
  const deepBg = spans[0].bg;

  // an exit rule with a threshold typed into #threshold: tokens at fewer steps, lighter
  await page.select('#exit_rule', 'entropy');
  await set('#threshold', expected.entropy_threshold);
  await page.click('#generate');
  await page.waitForFunction(() => !document.querySelector('#generate').disabled && document.querySelector('#summary').textContent.length > 0, { timeout: 60000 });
  spans = await page.$$eval('#output span', (s) => s.map((x) => ({ text: x.textContent, steps: Number(x.dataset.steps), bg: x.style.backgroundColor })));
  check(spans.length > 0, 'spans with the exit rule');
  check(spans.every((s) => s.steps >= 1 && s.steps <= expected.R), 'steps within 1..R');
  const shallow = spans.filter((s) => s.steps < expected.R), deep = spans.filter((s) => s.steps === expected.R);
  check(shallow.length > 0, 'some tokens exited early');
  check(shallow[0].bg !== deepBg, 'shallow and deep tokens shaded differently: ' + shallow[0].bg);
  // the summary says what the exit saved: with the page's default KV policy (last), the share of the loop
  const exitSummary = await page.$eval('#summary', (el) => el.textContent);
  check(/[1-9]\d*% of the loop's compute saved/.test(exitSummary), 'exit summary: ' + exitSummary);
  await page.select('#kv_policy', 'per_step');
  await page.click('#generate');
  await page.waitForFunction(() => !document.querySelector('#generate').disabled && document.querySelector('#summary').textContent.length > 0, { timeout: 60000 });
  const perStep = await page.$eval('#summary', (el) => el.textContent);
  check(perStep.includes('no compute saved'), 'per_step summary: ' + perStep);
  check(errors.length === 0, 'page errors: ' + errors.join('; '));
  console.log(JSON.stringify({ ok: true, spans: spans.length, shallow: shallow.length, deep: deep.length }));
} finally {
  await browser.close();
}
