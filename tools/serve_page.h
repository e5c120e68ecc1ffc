// The page `looplm serve` shows at / (docs/serve.md): a prompt, a generate button and the streamed
// completion, each token shaded by the loop steps it used (darker: deeper), with the looped
// controls (depth, exit rule, threshold) and a summary per request (tokens/s, loop steps per
// token, the KV policy's bytes per position). One self-contained file: no
// build step, no external assets. Element ids the browser test drives: #prompt, #generate,
// #output (a span per streamed piece, data-steps = the loop steps of its token), #threshold.
#pragma once

namespace looplm::serve {

inline constexpr const char* kPage = R"PAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>looplm</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
textarea { width: 100%; height: 6rem; font: inherit; }
fieldset { border: 1px solid #ccc; margin: .8rem 0; }
label { margin-right: 1rem; }
input[type=number] { width: 6rem; }
#output { white-space: pre-wrap; border: 1px solid #ccc; padding: .8rem; min-height: 4rem; font-family: ui-monospace, monospace; }
#output span { border-radius: 2px; }
#legend span { display: inline-block; padding: 0 .4rem; margin-right: .2rem; font-family: ui-monospace, monospace; }
#summary { color: #555; margin-top: .5rem; }
.error { color: #b00; }
</style></head>
<body>
<h1>looplm <small id="model"></small></h1>
<p>Each token of the answer is shaded by the loop steps the model ran for it: with an exit rule,
easy tokens leave the loop early (light), hard ones go deep (dark).</p>
<textarea id="prompt" placeholder="Type a prompt"></textarea>
<fieldset><legend>Generation</legend>
<label>max tokens <input id="max_tokens" type="number" value="120" min="1"></label>
<label>temperature <input id="temperature" type="number" value="0.8" min="0" max="2" step="0.1"></label>
<label>seed <input id="seed" type="number" value="1"></label>
</fieldset>
<fieldset><legend>Loop (looplm's extensions)</legend>
<label>depth <input id="depth" type="number" min="0" placeholder="R"></label>
<label>exit rule <select id="exit_rule"><option>fixed</option><option selected>kl</option><option>entropy</option><option>latent</option><option>gate</option></select></label>
<label>threshold <input id="threshold" type="number" value="0.01" step="any"></label>
<label>KV policy <select id="kv_policy"><option>per_step</option><option>mean</option><option selected>last</option><option>first</option></select></label>
</fieldset>
<button id="generate">Generate</button>
<p id="legend"></p>
<div id="output"></div>
<div id="summary"></div>
<script>
const $ = (id) => document.getElementById(id);
let depthMax = 1;
fetch('/v1/models').then(r => r.json()).then(m => {
  $('model').textContent = m.data[0].id;
  document.title = 'looplm: ' + m.data[0].id;
  // max tokens within the positions a request may use (a 64-position model cannot make 120)
  const ctx = m.data[0].looplm.context, mt = $('max_tokens');
  if (ctx) {
    mt.max = ctx;
    if (Number(mt.value) > ctx) mt.value = Math.max(1, Math.floor(ctx / 2));
  }
  depthMax = m.data[0].looplm.R || 1;
  $('depth').placeholder = 'R = ' + depthMax;
  if (!m.data[0].looplm.exit_gate) $('exit_rule').querySelector('option:last-child').disabled = true;
  legend();
});
function shade(steps) {
  const f = Math.min(1, steps / Math.max(1, depthMax));
  return 'rgba(40, 90, 200, ' + (0.08 + 0.6 * f).toFixed(3) + ')';
}
function legend() {
  const l = $('legend');
  l.textContent = 'loop steps: ';
  for (let r = 1; r <= depthMax; ++r) {
    const s = document.createElement('span');
    s.textContent = r;
    s.style.background = shade(r);
    l.appendChild(s);
  }
}
$('generate').addEventListener('click', async () => {
  const out = $('output'), summary = $('summary');
  out.textContent = '';
  summary.textContent = '';
  summary.className = '';
  const depth = $('depth').value === '' ? null : Number($('depth').value);
  if (depth !== null) { depthMax = depth; legend(); }
  const body = {prompt: $('prompt').value, max_tokens: Number($('max_tokens').value), temperature: Number($('temperature').value),
                seed: Number($('seed').value), stream: true, exit_rule: $('exit_rule').value, kv_policy: $('kv_policy').value};
  if (depth !== null) body.depth = depth;
  if (body.exit_rule !== 'fixed') body.exit_threshold = Number($('threshold').value);
  $('generate').disabled = true;
  const t0 = performance.now();
  let tokens = 0, steps = 0, usage = null, finish = '', loop = null;
  try {
    const r = await fetch('/v1/completions', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
    if (!r.ok) { const e = await r.json(); throw new Error(e.error ? e.error.message : r.statusText); }
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 2);
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        if (chunk.looplm) loop = chunk.looplm;
        for (const c of chunk.choices) {
          const st = c.looplm ? c.looplm.steps : [];
          if (c.text) {
            const span = document.createElement('span');
            span.textContent = c.text;
            const s = st.length ? Math.max(...st) : 0;
            span.dataset.steps = s;
            span.title = st.length ? 'loop steps: ' + st.join(', ') : '';
            span.style.background = shade(s);
            out.appendChild(span);
          }
          tokens += st.length;
          for (const s of st) steps += s;
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    }
    const secs = (performance.now() - t0) / 1000;
    summary.textContent = tokens + ' tokens in ' + secs.toFixed(2) + ' s (' + (tokens / secs).toFixed(1) + ' tokens/s), ' +
      (tokens ? (steps / tokens).toFixed(2) : '0') + ' loop steps per token of ' + depthMax +
      // what the exit saved: per_step runs the steps after each exit for the KV cache (none saved)
      (body.exit_rule !== 'fixed' ? (body.kv_policy === 'per_step' ? ', all ' + depthMax + ' computed (per_step runs the rest for the cache: no compute saved)'
        : ', ' + (tokens ? (100 * (1 - steps / tokens / depthMax)).toFixed(0) : '0') + '% of the loop\'s compute saved') : '') +
      (finish ? ', finished: ' + finish : '') +
      (usage ? ', prompt ' + usage.prompt_tokens + ' tokens' : '') +
      (loop ? ', KV cache ' + Math.round(loop.kv_bytes_per_token) + ' bytes per position' : '');
  } catch (e) {
    summary.textContent = 'error: ' + e.message;
    summary.className = 'error';
  }
  $('generate').disabled = false;
});
</script>
</body></html>
)PAGE";

}  // namespace looplm::serve
