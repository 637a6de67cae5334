// The dashboard: polls /v1/residency/stats once a second and draws the heatmap (canvas) and the
// cold-share and throughput charts (SVG). Plain browser JavaScript, no build step.
// An API key, when the server has one, is read from the page's fragment: /#key=KEY; the buttons (freeze,
// adapt, restore) send POST /v1/residency/control with #control_key=KEY when given, else with the same key.
'use strict';

const state = { updates: 0, lastError: null, last: null };
window.__dashboard = state; // for tests and curious humans

const fragment = new URLSearchParams(location.hash.slice(1));
const key = fragment.get('key');
const headers = key ? { authorization: `Bearer ${key}` } : {};
const controlKey = fragment.get('control_key') || key;
const $ = (id) => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
const pct = (v) => (v === null || v === undefined ? '-' : `${(v * 100).toFixed(2)}%`);

function drawHeatmap(s) {
  const cv = $('heatmap');
  const ctx = cv.getContext('2d');
  const L = s.geometry.layers, E = s.geometry.experts;
  const labelW = 40, pad = 4;
  const cw = (cv.width - labelW - pad) / E, ch = (cv.height - pad * 2) / L;
  ctx.fillStyle = '#161b22';
  ctx.fillRect(0, 0, cv.width, cv.height);
  ctx.font = '11px system-ui';
  for (let l = 0; l < L; l++) {
    const use = s.expert_use[l] || [];
    const max = Math.max(1e-9, ...use);
    ctx.fillStyle = '#8fa1b3';
    ctx.fillText(`L${l}`, 6, pad + l * ch + ch / 2 + 4);
    for (let e = 0; e < E; e++) {
      const v = (use[e] || 0) / max; // share of the layer's busiest expert
      const x = labelW + e * cw, y = pad + l * ch;
      // Dark blue (unused) to bright yellow (busiest): a simple two-stop ramp.
      const r = Math.round(30 + 225 * v), g = Math.round(40 + 180 * v), b = Math.round(90 - 40 * v);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(x + 0.5, y + 0.5, Math.max(1, cw - 1), Math.max(1, ch - 1));
      if (!s.hot[l][e]) {
        ctx.strokeStyle = '#ff6b6b';
        ctx.lineWidth = 1.5;
        ctx.strokeRect(x + 1.25, y + 1.25, Math.max(1, cw - 2.5), Math.max(1, ch - 2.5));
      }
    }
  }
}

function line(svg, pts, color) {
  const p = document.createElementNS(SVG, 'polyline');
  p.setAttribute('points', pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' '));
  p.setAttribute('fill', 'none');
  p.setAttribute('stroke', color);
  p.setAttribute('stroke-width', '2');
  p.setAttribute('vector-effect', 'non-scaling-stroke');
  svg.appendChild(p);
}

function text(svg, x, y, s) {
  const t = document.createElementNS(SVG, 'text');
  t.setAttribute('x', x); t.setAttribute('y', y); t.setAttribute('fill', '#8fa1b3'); t.setAttribute('font-size', '11');
  t.textContent = s;
  svg.appendChild(t);
}

/** Seconds before the latest sample under the x axis (at about five places), and the clock time at the right. */
function timeAxis(svg, hist, X, H) {
  if (hist.length < 2) return;
  const end = hist[hist.length - 1].t;
  const ticks = 5;
  for (let k = 0; k < ticks; k++) {
    const i = Math.round((k / (ticks - 1)) * (hist.length - 1));
    const ago = (end - hist[i].t) / 1000;
    const label = k === ticks - 1 ? new Date(end).toLocaleTimeString() : `-${ago < 100 ? ago.toFixed(0) : Math.round(ago)} s`;
    const t = document.createElementNS(SVG, 'text');
    t.setAttribute('x', Math.min(X(i), X(hist.length - 1) - 52)); t.setAttribute('y', H - 2);
    t.setAttribute('fill', '#8fa1b3'); t.setAttribute('font-size', '10'); t.setAttribute('class', 'time-tick');
    t.textContent = label;
    svg.appendChild(t);
  }
}

/** A time series chart: y from `pick`, x spread over the samples; `marks` draws vertical event ticks. */
function drawSeries(svg, hist, pick, color, fmt, marks) {
  const [, , W, H] = svg.getAttribute('viewBox').split(' ').map(Number);
  svg.replaceChildren();
  const ys = hist.map(pick).filter((v) => v !== null && v !== undefined);
  const top = Math.max(1e-9, ...ys) * 1.15;
  const n = Math.max(2, hist.length);
  const X = (i) => 40 + (i / (n - 1)) * (W - 50);
  const Y = (v) => H - 16 - (v / top) * (H - 26);
  text(svg, 2, 14, fmt(top));
  text(svg, 2, H - 16, fmt(0));
  timeAxis(svg, hist, X, H);
  if (marks) {
    for (let i = 1; i < hist.length; i++) {
      const d = marks(hist[i]) - marks(hist[i - 1]);
      if (d > 0) {
        const t = document.createElementNS(SVG, 'line');
        t.setAttribute('x1', X(i)); t.setAttribute('x2', X(i)); t.setAttribute('y1', 8); t.setAttribute('y2', H - 16);
        t.setAttribute('stroke', '#f0c674'); t.setAttribute('stroke-opacity', '0.5');
        t.setAttribute('class', 'swap-mark');
        svg.appendChild(t);
      }
    }
  }
  const pts = [];
  hist.forEach((h, i) => { const v = pick(h); if (v !== null && v !== undefined) pts.push([X(i), Y(v)]); });
  if (pts.length === 1) pts.push([pts[0][0] + 1, pts[0][1]]);
  if (pts.length > 0) line(svg, pts, color);
}

function render(s) {
  $('model').textContent = s.model;
  $('step').textContent = s.step;
  $('cold').textContent = `${pct(s.cold_share.window)} (overall ${pct(s.cold_share.overall)})`;
  $('swaps').textContent = `${s.swaps.applied} / ${s.swaps.refused}`;
  $('queue').textContent = `${s.queue_depth} / ${s.running}`;
  const last = s.history[s.history.length - 1];
  $('tps').textContent = last ? last.tokens_per_s.toFixed(1) : '-';
  $('controller').textContent = Object.entries(s.controller).filter(([, v]) => typeof v !== 'object').map(([k, v]) => `${k}=${v}`).join(' ');
  const c = s.controller;
  const st = c.counting === false ? 'off' : c.frozen ? 'frozen' : 'adapting';
  $('state').textContent = st === 'off' ? 'counting off' : st === 'frozen' ? 'frozen (counting only)' : 'adapting';
  $('state').className = `state ${st}`;
  $('freeze').disabled = st === 'frozen';
  $('adapt').disabled = st === 'adapting';
  drawHeatmap(s);
  drawSeries($('coldshare'), s.history, (h) => h.cold_share, '#5fb3f6', pct, (h) => h.swaps_applied);
  drawSeries($('throughput'), s.history, (h) => h.tokens_per_s, '#8fd18f', (v) => v.toFixed(0));
}

async function poll() {
  try {
    const r = await fetch('/v1/residency/stats', { headers, cache: 'no-store' });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : `HTTP ${r.status}`);
    state.last = body;
    render(body);
    state.updates++;
    $('status').textContent = `live, updated ${new Date(body.time).toLocaleTimeString()}`;
  } catch (e) {
    state.lastError = String(e.message || e);
    $('status').textContent = `error: ${state.lastError}`;
  } finally {
    setTimeout(poll, 1000);
  }
}
/** One control command (the same parser as the control file); the reply or the error shows beside the buttons. */
async function control(command) {
  const out = $('control-status');
  out.textContent = 'sending...';
  try {
    const r = await fetch('/v1/residency/control', { method: 'POST', headers: { 'content-type': 'application/json', ...(controlKey ? { authorization: `Bearer ${controlKey}` } : {}) }, body: JSON.stringify(command) });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : `HTTP ${r.status}`);
    const changes = (body.result && body.result.changes) || body.changes || [];
    out.textContent = `done: ${changes.length > 0 ? changes.join('; ') : 'no change'}`;
    state.controls++;
  } catch (e) {
    out.textContent = `refused: ${e.message || e}`;
    state.lastControlError = String(e.message || e);
  }
}
state.controls = 0;
state.lastControlError = null;
$('freeze').addEventListener('click', () => control({ freeze: true }));
$('adapt').addEventListener('click', () => control({ freeze: false, baseline: true }));
$('restore').addEventListener('click', () => control({ restore_map: true }));
poll();
