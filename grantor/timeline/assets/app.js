// The lease timeline. It reads the window's tenures from /api/tenures (at
// most its limit, the most recently active), then follows /events after
// the last record read (each new one), folds the records into tenures as
// history.Fold does, keeping at most the limit (the least recently active
// that has ended let go), and draws one lane per lease in SVG.
//
// Lease names, holders and reasons are chosen by callers: they reach the
// document only through textContent and setAttribute, never as HTML.
'use strict';

(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const params = new URLSearchParams(location.search);
  const prefix = params.get('prefix') || '';
  const since = params.get('since') || '';
  const limitParam = params.get('limit') || '';
  const jaeger = (document.body.dataset.jaeger || '').replace(/\/+$/, '');

  const LABEL_W = 210; // lease names
  const RIGHT_PAD = 28; // room for the end marks at "now"
  const AXIS_H = 26;
  const LANE_H = 28;
  const BAR_H = 16;
  const MIN_SPAN = 5000; // ms: the narrowest window drawn
  const MIN_BAR_W = 2; // px: the narrowest bar drawn

  // key → tenure, the least recently active first (fold moves a tenure
  // it adds a record to last): at most limit, the first let go.
  const tenures = new Map();
  const DEFAULT_LIMIT = 2000; // the server's (timeline.DefaultLimit)
  let limit = Infinity; // of the server's reply
  let total = 0; // tenures in the window, as counted (the server's, and new ones since)
  let truncated = false; // the window holds more than are shown
  let offset = 0; // the server's clock less the browser's, ms
  let windowMS = 0; // since as a duration (a sliding window), or 0
  let sinceMS = null; // since as a time; null until caught up
  let caughtUp = false;
  let pinned = null; // key of the tenure whose details stay shown
  let shown = null; // key of the tenure whose details are shown
  let scheduled = false;
  // The clusters of the last drawing (key → cluster): in a lane with more
  // tenures than it has room for, a run of tenures too short to draw one
  // by one is drawn as one (render).
  let clusters = new Map();
  let clusterOf = new Map(); // key of a clustered tenure → its cluster's key
  let drawn = { from: 0, to: -1 }; // the lanes drawn (render), by index

  const $ = (id) => document.getElementById(id);
  $('prefix').value = prefix;
  $('since').value = since;

  function serverNow() { return Date.now() + offset; }
  function ms(s) {
    if (!s) return null;
    const t = Date.parse(s);
    return isNaN(t) ? null : t;
  }

  // record parses an event's history record. Tokens and revisions are
  // uint64: a JavaScript number rounds those above 2^53 (a bucket made
  // with --first-token has them up to 2^61) to a multiple of up to 512,
  // which folded the tenures of a lease granted within 512 revisions into
  // one and showed a token never issued. They are kept as their decimal
  // text: the JSON is Go's (history.Record), whose only keys named so are
  // these, and a "token": or "revision": in a string's text has its
  // quotes escaped, so the pattern can only match the keys.
  function record(data) {
    const r = JSON.parse(data.replace(/"(token|revision)":(\d+)/g, '"$1":"$2"'));
    if (typeof r === 'object' && r !== null) {
      r.token = /^[1-9][0-9]*$/.test(r.token) ? r.token : ''; // '': 0 or absent, unknown
      r.revision = /^[0-9]+$/.test(r.revision) ? r.revision : '';
    }
    return r;
  }
  // compareTokens orders tokens as record keeps them (decimal text, ''
  // for none first).
  function compareTokens(a, b) {
    if (a.length !== b.length) return a.length - b.length;
    return a < b ? -1 : a > b ? 1 : 0;
  }

  // fold adds one history record to the tenures: the same rules as
  // history.Fold (a tenure is a lease name and token; the first holder,
  // trace and grant time seen stick; the first end sets the end), so repeated
  // records change nothing.
  function fold(r) {
    if (typeof r !== 'object' || r === null || typeof r.name !== 'string') return;
    // An end whose begin no observer saw (token 0) is a row of its own.
    const key = r.token ? r.name + '\u0000' + r.token : r.name + '\u0000rev' + r.revision;
    let t = tenures.get(key);
    if (t) { // now the most recently active
      tenures.delete(key);
      tenures.set(key, t);
    }
    if (r.kind === 'freed') {
      // The hold of a revocation that ended t, freed: a free of a tenure
      // not in the window is no row of its own.
      if (t) t.freed = t.freed === null ? ms(r.time) : Math.min(t.freed, ms(r.time));
      return;
    }
    if (!t) {
      t = { key, name: r.name, token: r.token, holder: '', from: null, to: null, durationMS: 0,
        renewals: 0, endedBy: '', reason: '', flapping: false, traceID: '', inferredTo: null,
        heldUntil: null, freed: null, next: null };
      add(t);
      // Counted unless its grant, in the window, was (as the server counts).
      const granted = ms(r.granted_at);
      if (r.kind === 'granted' || !r.token || granted === null || (sinceMS !== null && granted < sinceMS)) total++;
    }
    t.holder = t.holder || String(r.holder || '');
    t.traceID = t.traceID || String(r.trace_id || '');
    if (t.from === null) t.from = ms(r.granted_at);
    t.durationMS = t.durationMS || Number(r.duration_ms) || 0;
    t.flapping = t.flapping || r.flapping === true;
    if (r.kind === 'ended' && !t.endedBy) {
      // The first end stands, as in history.Fold: a tenure ends once.
      t.to = ms(r.time);
      t.endedBy = String(r.ended_by || 'unknown');
      t.reason = String(r.reason || '');
      // A revocation that held the lease, no grant allowed (history.Tenure.HeldUntil).
      if (Number(r.hold_ms) > 0 && t.to !== null) t.heldUntil = t.to + Number(r.hold_ms);
    }
    if (r.kind === 'ended') t.renewals = Math.max(t.renewals, Number(r.renewals) || 0);
  }

  // add adds a new tenure, letting the least recently active that has
  // ended go if there are more than limit (a page followed for days on a
  // busy node kept every tenure of its window, however many), a live one
  // only if none has: a lease held for long, with no record since its
  // grant, vanished from the page while held, as /api/tenures keeps it.
  function add(t) {
    tenures.set(t.key, t);
    if (tenures.size <= limit) return;
    let drop = tenures.keys().next().value;
    for (const [k, x] of tenures) {
      if (x.endedBy || x.to !== null || x.inferredTo !== null) {
        drop = k;
        break;
      }
    }
    tenures.delete(drop);
    truncated = true;
  }

  // fromReply adds a tenure of /api/tenures' reply (history.Tenure in
  // JSON, its token as decimal text); i makes the key of one whose begin
  // no observer saw (token 0) its own.
  function fromReply(x, i) {
    if (typeof x !== 'object' || x === null || typeof x.name !== 'string') return;
    const token = /^[1-9][0-9]*$/.test(x.token) ? x.token : '';
    const key = token ? x.name + '\u0000' + token : x.name + '\u0000api' + i;
    // An end inferred from the next tenure's begin is inferred again
    // (render), so that a record of the end that comes later stands.
    const endedBy = x.end_inferred === true ? '' : String(x.ended_by || '');
    const to = endedBy ? ms(x.to) : null;
    // The hold its revocation gave (hold_ms), and its end if sooner: a
    // free, or the next tenure's begin.
    const heldUntil = to !== null && Number(x.hold_ms) > 0 ? to + Number(x.hold_ms) : null;
    const heldEnd = ms(x.held_until);
    add({ key, name: x.name, token, holder: String(x.holder || ''), from: ms(x.from), to,
      durationMS: Number(x.duration_ms) || 0, renewals: Number(x.renewals) || 0, endedBy, reason: String(x.reason || ''),
      flapping: x.flapping === true, traceID: String(x.trace_id || ''), inferredTo: null,
      heldUntil, freed: heldUntil !== null && heldEnd !== null && heldEnd < heldUntil ? heldEnd : null, next: null });
  }

  // lastActive orders a tenure of /api/tenures' reply by its last record,
  // as the server does: its end (its begin if that was inferred); the
  // live ones after all others (the server read the live leases last),
  // by their begin.
  const LIVE = 1e15; // ms: past any time's
  function lastActive(x) {
    if (typeof x !== 'object' || x === null) return -Infinity;
    const at = !x.ended_by || x.end_inferred === true ? ms(x.from) : ms(x.to);
    return (x.ended_by ? 0 : LIVE) + (at !== null ? at : 0);
  }

  function start(t) { return t.from !== null ? t.from : t.to; }
  // A tenure's end and its cause ('' while live): its end record's, or, as
  // history.Fold has it, the begin of the next tenure of its lease when
  // no record ended it (render sets inferredTo; a record that comes later
  // stands).
  function endOf(t) { return t.to !== null ? t.to : t.inferredTo; }
  function causeOf(t) { return t.endedBy || (t.inferredTo !== null ? 'unknown' : ''); }
  // The end of the hold a revocation left after t (null: none): when it
  // ran out (heldUntil) or was freed, or the next tenure began (render
  // sets next), as history.Tenure.HeldUntil.
  function holdEnd(t) {
    if (t.heldUntil === null || endOf(t) === null) return null;
    return Math.min(t.heldUntil, t.freed !== null ? t.freed : Infinity, t.next !== null ? t.next : Infinity);
  }

  // A holder's colour: a hue from a hash of its name, the same on every
  // page and every load.
  function colour(holder) {
    if (!holder) return 'hsl(0, 0%, 62%)';
    let h = 0x811c9dc5; // FNV-1a
    for (let i = 0; i < holder.length; i++) {
      h ^= holder.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return 'hsl(' + (h % 360) + ', ' + (55 + (h >>> 9) % 25) + '%, ' + (42 + (h >>> 17) % 16) + '%)';
  }

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, attrs, s) {
    const e = el('text', attrs, parent);
    e.textContent = s;
    return e;
  }
  function title(parent, s) {
    const e = el('title', {}, parent);
    e.textContent = s;
  }

  // The mark at a tenure's end, by cause.
  const causes = {
    released: 'released by its holder',
    revoked: 'revoked by an operator',
    expired: 'expired: its TTL lapsed',
    removed: 'removed: gossip declared its node dead',
    unknown: 'ended, cause unknown (the observer missed it)',
    live: 'live: still held',
  };
  function endMark(g, cause, x, y) {
    const m = el('g', { class: 'end end-' + cause }, g);
    switch (cause) {
      case 'released':
        el('line', { x1: x, y1: y - 9, x2: x, y2: y + 9 }, m);
        break;
      case 'revoked':
        el('path', { d: 'M' + (x - 5) + ' ' + (y - 5) + 'l10 10m0 -10l-10 10' }, m);
        break;
      case 'expired':
        el('circle', { cx: x, cy: y, r: 4.5 }, m);
        break;
      case 'removed':
        el('path', { d: 'M' + x + ' ' + (y - 6) + 'l6 6l-6 6l-6 -6z' }, m);
        break;
      case 'live':
        el('path', { d: 'M' + x + ' ' + (y - 6) + 'l8 6l-8 6z' }, m);
        break;
      default:
        text(m, { x: x + 2, y: y + 4 }, '?');
    }
    return m;
  }

  // The fill of a revocation's hold: red stripes, over the lane.
  function holdPattern(defs, id) {
    const p = el('pattern', { id, width: 5, height: 5, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(-45)' }, defs);
    el('line', { class: 'hold-stripe', x1: 1, y1: 0, x2: 1, y2: 5 }, p);
  }

  function legend() {
    const box = $('legend');
    for (const cause of ['released', 'revoked', 'expired', 'removed', 'unknown', 'live']) {
      const item = document.createElement('span');
      item.className = 'legend-item';
      const svg = el('svg', { width: 18, height: 18, viewBox: '0 0 18 18' }, item);
      endMark(svg, cause, cause === 'live' ? 5 : 9, 9);
      const label = document.createElement('span');
      label.textContent = cause;
      label.title = causes[cause];
      item.appendChild(label);
      box.appendChild(item);
    }
    const hold = document.createElement('span');
    hold.className = 'legend-item';
    const hsvg = el('svg', { width: 18, height: 18, viewBox: '0 0 18 18' }, hold);
    holdPattern(el('defs', {}, hsvg), 'hold-fill-legend');
    el('rect', { class: 'hold hold-legend', x: 1, y: 5, width: 16, height: 8 }, hsvg); // no inline style: the page's CSP refuses it
    const hlabel = document.createElement('span');
    hlabel.textContent = 'held after revocation';
    hlabel.title = 'a revocation holds the lease, no grant allowed, until the revoked holder\'s deadline has surely passed, or its holder releases it';
    hold.appendChild(hlabel);
    box.appendChild(hold);
    const flap = document.createElement('span');
    flap.className = 'legend-item legend-flapping';
    flap.textContent = 'FLAPPING: granted anew too often';
    box.appendChild(flap);
  }

  function pad2(n) { return (n < 10 ? '0' : '') + n; }
  function clock(t) {
    const d = new Date(t);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds());
  }
  function stamp(t) {
    if (t === null) return '(before the window)';
    const d = new Date(t);
    return d.getFullYear() + '-' + pad2(d.getMonth() + 1) + '-' + pad2(d.getDate()) + ' ' + clock(t) +
      '.' + String(d.getMilliseconds()).padStart(3, '0');
  }
  function dur(d) {
    if (d < 1000) return Math.round(d) + ' ms';
    if (d < 60000) return (d / 1000).toFixed(d < 10000 ? 2 : 1) + ' s';
    const s = Math.round(d / 1000);
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  }
  function truncate(s, chars) {
    return s.length <= chars ? s : s.slice(0, Math.max(0, chars - 1)) + '…';
  }
  function summary(t, now) {
    const end = causeOf(t) || 'live';
    const held = t.from !== null ? ' for ' + dur((endOf(t) !== null ? endOf(t) : now) - t.from) : '';
    return t.name + ': ' + (t.holder || '(holder unknown)') + ', token ' + (t.token || '?') + held + ', ' + end +
      (t.reason ? ' (' + t.reason + ')' : '');
  }

  function holdSummary(t, held, now) {
    const why = held < t.heldUntil ? ' (freed early)'
      : held > now ? ' at the latest (sooner if its holder releases it)'
        : ' (by then the revoked holder\'s deadline had passed)';
    return 'held after the revocation, no grant allowed, until ' + stamp(held) + why;
  }

  const TICKS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  function render() {
    scheduled = false;
    if (!caughtUp) return;
    const now = serverNow();
    const windowStart = windowMS ? now - windowMS : sinceMS;
    const lanes = new Map();
    for (const t of tenures.values()) {
      if (!lanes.has(t.name)) lanes.set(t.name, []);
      lanes.get(t.name).push(t);
    }
    // A lease has one tenure at a time (history.Fold): one with no end
    // record that a later tenure followed had ended by that one's begin.
    // Drawn live, it lay under its successor: two holders at once.
    for (const ts of lanes.values()) {
      const byToken = ts.filter((t) => t.token).sort((a, b) => compareTokens(a.token, b.token));
      byToken.forEach((t, i) => {
        t.next = i + 1 < byToken.length ? start(byToken[i + 1]) : null;
        t.inferredTo = t.next;
      });
    }
    for (const [name, ts] of lanes) {
      const kept = [];
      for (const t of ts) {
        const end = endOf(t);
        if (end !== null && end < windowStart) tenures.delete(t.key); // slid out of the window: forgotten
        else kept.push(t);
      }
      if (kept.length) lanes.set(name, kept); else lanes.delete(name);
    }
    const names = [...lanes.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    // A tenure whose begin no record gave began after the end of the one
    // before it in its lane (a lease has one tenure at a time), or before
    // the window: it is drawn from there, marked (drawn from the window's
    // start, it read as held all that time).
    const drawFrom = new Map();
    for (const ts of lanes.values()) {
      ts.sort((a, b) => (start(a) - start(b)) || compareTokens(a.token, b.token));
      let prevEnd = windowStart;
      for (const t of ts) {
        const from = t.from !== null ? t.from : Math.min(prevEnd, start(t) !== null ? start(t) : now);
        drawFrom.set(t.key, Math.max(from, windowStart));
        if (endOf(t) !== null) prevEnd = Math.max(prevEnd, endOf(t));
      }
    }
    let t0 = now;
    for (const ts of lanes.values()) {
      for (const t of ts) t0 = Math.min(t0, drawFrom.get(t.key));
    }
    t0 = Math.max(t0, windowStart);
    let t1 = now;
    if (t1 - t0 < MIN_SPAN) t0 = t1 - MIN_SPAN;
    t0 -= (t1 - t0) * 0.02;

    const chart = $('chart');
    const width = Math.max(600, chart.clientWidth || 1000);
    const plotW = width - LABEL_W - RIGHT_PAD;
    const x = (t) => LABEL_W + ((t - t0) / (t1 - t0)) * plotW;
    const height = AXIS_H + names.length * LANE_H + 4;
    const svg = el('svg', { id: 'timeline', width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img',
      'aria-label': 'tenures of ' + names.length + ' leases' });

    // The time axis.
    const axis = el('g', { class: 'axis' }, svg);
    const want = Math.max(2, plotW / 110);
    const step = (TICKS.find((s) => (t1 - t0) / (s * 1000) <= want) || TICKS[TICKS.length - 1]) * 1000;
    for (let v = Math.ceil(t0 / step) * step; v <= t1; v += step) {
      el('line', { x1: x(v), y1: AXIS_H - 6, x2: x(v), y2: height, class: 'tick' }, axis);
      text(axis, { x: x(v), y: AXIS_H - 10, 'text-anchor': 'middle' }, clock(v));
    }
    el('line', { x1: x(now), y1: AXIS_H - 6, x2: x(now), y2: height, class: 'now' }, axis);

    const before = clusters;
    clusters = new Map();
    clusterOf = new Map();
    const defs = el('defs', {}, svg);
    const hatch = el('pattern', { id: 'cluster-fill', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(45)' }, defs);
    el('rect', { class: 'cluster-bg', width: 6, height: 6 }, hatch);
    el('line', { class: 'cluster-stripe', x1: 1.5, y1: 0, x2: 1.5, y2: 6 }, hatch);
    holdPattern(defs, 'hold-fill');
    // Only the lanes within a screen of the viewport are drawn; the
    // others keep their place, empty, until scrolled to (scroll).
    const view = viewport(chart);
    const lo = Math.max(0, view.first - view.screen);
    drawn = { from: lo - lo % 2, to: view.first + 2 * view.screen }; // from even: the lanes' backgrounds alternate
    names.forEach((name, i) => {
      const ts = lanes.get(name);
      const laneRuns = runs(ts, ts.length * MIN_BAR_W > plotW, x, t0, now, drawFrom);
      for (const run of laneRuns) {
        if (run.length > 1) cluster(name, run);
      }
      if (i < drawn.from || i > drawn.to) return;
      const flapping = ts.some((t) => t.flapping);
      const y = AXIS_H + i * LANE_H;
      const mid = y + LANE_H / 2;
      const lane = el('g', { class: 'lane' + (flapping ? ' flapping' : ''), 'data-lane': name }, svg);
      el('rect', { class: 'lane-bg', x: 0, y: y + 1, width, height: LANE_H - 2 }, lane);
      const label = text(lane, { class: 'lane-name', x: 8, y: mid + 4 }, truncate(name, flapping ? 18 : 27));
      title(label, name);
      if (flapping) text(lane, { class: 'flap-badge', x: LABEL_W - 8, y: mid + 4, 'text-anchor': 'end' }, 'FLAPPING');
      el('rect', { class: 'track', x: LABEL_W, y: mid - BAR_H / 2, width: plotW, height: BAR_H }, lane);
      const ends = []; // drawn over every bar: an end where the next tenure begins stays visible
      for (const run of laneRuns) {
        if (run.length > 1) {
          ends.push(drawCluster(lane, run, mid));
          continue;
        }
        const { t, x0, w } = run[0];
        const cause = causeOf(t) || 'live';
        const g = el('g', { class: 'bar' + (t.key === pinned ? ' pinned' : '') + (t.from === null ? ' begin-unknown' : ''),
          'data-key': t.key, 'data-holder': t.holder, 'data-token': t.token || 0, 'data-ended-by': cause,
          tabindex: 0, role: 'button', 'aria-label': summary(t, now) }, lane);
        title(g, summary(t, now));
        el('rect', { class: 'bar-body', x: x0, y: mid - BAR_H / 2, width: w, height: BAR_H, rx: 2, fill: colour(t.holder) }, g);
        const chars = Math.floor((w - 8) / 6.6);
        if (chars >= 4 && t.holder) text(g, { class: 'bar-label', x: x0 + 4, y: mid + 4 }, truncate(t.holder, chars));
        const held = holdEnd(t);
        if (held !== null && held > endOf(t)) {
          // The lease stayed held after the revocation: no one could take it.
          const hx = x(Math.min(held, now));
          const hold = el('rect', { class: 'hold', x: x0 + w, y: mid - BAR_H / 2 + 3, width: Math.max(hx - x0 - w, 0),
            height: BAR_H - 6 }, g);
          title(hold, holdSummary(t, held, now));
        }
        ends.push([cause, x0 + w]);
      }
      const marks = el('g', { class: 'ends' }, lane);
      for (const [cause, at] of ends) endMark(marks, cause, at, mid);
    });
    const focused = document.activeElement instanceof Element && document.activeElement.closest('#timeline .bar, #timeline .cluster');
    chart.replaceChildren(svg);
    pinned = regrouped(pinned, before);
    shown = regrouped(shown, before);
    if (focused) { // keep the keyboard's place across redraws
      const key = regrouped(focused.dataset.key, before);
      for (const g of svg.querySelectorAll('.bar, .cluster')) {
        if (g.dataset.key === key) g.focus({ preventScroll: true });
      }
    }
    $('empty').hidden = names.length > 0;
    const n = [...lanes.values()].reduce((a, ts) => a + ts.length, 0);
    status('live · ' + names.length + (names.length === 1 ? ' lease, ' : ' leases, ') + n + (n === 1 ? ' tenure' : ' tenures'));
    const notice = $('notice');
    notice.hidden = !truncated;
    if (truncated) {
      notice.textContent = n + ' of ' + Math.max(total, n) + ' tenures shown, the live ones first, then the most recently active (at most ' + limit +
        '): narrow by prefix or since to see the others';
    }
    if (shown !== null) details(find(shown));
  }

  // runs are the lane's tenures as drawn, in order ({t, from, x0, w}
  // each, w MIN_BAR_W at least): each alone, but in a dense lane (coalesce:
  // more tenures than room to draw them MIN_BAR_W wide)
  // a run of tenures too short to draw (narrower than MIN_BAR_W), each
  // less than a pixel after the one before, is one cluster, counted, not
  // drawn tenure by tenure: a lane has at most an element or two per
  // pixel of the plot, however many tenures it had.
  function runs(ts, coalesce, x, t0, now, drawFrom) {
    const out = [];
    let open = null; // the run the next narrow tenure may join
    let openEnd = 0; // its right edge
    for (const t of ts) {
      const from = Math.max(drawFrom.get(t.key), t0);
      const x0 = x(from);
      const raw = x(endOf(t) !== null ? endOf(t) : now) - x0;
      const item = { t, from, x0, w: Math.max(MIN_BAR_W, raw) };
      const narrow = coalesce && raw < MIN_BAR_W;
      if (narrow && open && x0 < openEnd + 1) {
        open.push(item);
        openEnd = Math.max(openEnd, x0 + item.w);
      } else {
        const run = [item];
        out.push(run);
        open = narrow ? run : null;
        openEnd = x0 + item.w;
      }
    }
    return out;
  }

  // viewport is the index of the first lane in the viewport (negative
  // above the chart) and how many lanes a screen holds.
  function viewport(chart) {
    return { first: Math.floor((-chart.getBoundingClientRect().top - AXIS_H) / LANE_H),
      screen: Math.ceil((window.innerHeight || 800) / LANE_H) };
  }

  // A cluster's key: its first tenure's, marked (no lease name begins with NUL).
  function clusterKey(t) { return '\u0000cluster\u0000' + t.key; }

  // cluster records a run of tenures drawn as one, drawn or not.
  function cluster(name, run) {
    const ts = run.map((r) => r.t);
    const c = { cluster: true, key: clusterKey(ts[0]), name, tenures: ts, from: run[0].from };
    clusters.set(c.key, c);
    for (const t of ts) clusterOf.set(t.key, c.key);
  }

  function drawCluster(lane, run, mid) {
    const c = clusters.get(clusterKey(run[0].t));
    const ts = c.tenures;
    const last = ts[ts.length - 1];
    const x0 = run[0].x0;
    let x1 = x0;
    for (const r of run) x1 = Math.max(x1, r.x0 + r.w);
    const holders = new Set(ts.map((t) => t.holder));
    const g = el('g', { class: 'cluster', 'data-key': c.key, 'data-count': ts.length, tabindex: 0, role: 'button',
      'aria-label': clusterSummary(c) }, lane);
    title(g, clusterSummary(c));
    el('rect', { class: 'cluster-body', x: x0, y: mid - BAR_H / 2, width: x1 - x0, height: BAR_H, rx: 2,
      fill: holders.size === 1 ? colour(last.holder) : 'url(#cluster-fill)' }, g);
    const label = ts.length + ' tenures';
    if (x1 - x0 - 8 >= label.length * 6.6) text(g, { class: 'cluster-label', x: x0 + 4, y: mid + 4 }, label);
    return [causeOf(last) || 'live', x1];
  }

  // counts is "a ×3, b ×2" of the values, the most frequent first, the
  // first few.
  function counts(values, none) {
    const n = new Map();
    for (const v of values) n.set(v, (n.get(v) || 0) + 1);
    const sorted = [...n].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const shown = sorted.slice(0, 4).map(([v, k]) => (v || none) + ' \u00d7' + k);
    if (sorted.length > 4) shown.push('and ' + (sorted.length - 4) + ' more');
    return shown.join(', ');
  }
  function clusterSummary(c) {
    return c.name + ': ' + c.tenures.length + ' tenures too short to draw one by one (narrow the window to see each), held by ' +
      counts(c.tenures.map((t) => t.holder), '(holder unknown)') + '; ended ' + counts(c.tenures.map((t) => causeOf(t) || 'live'));
  }

  // find is the tenure or cluster of the last drawing key names.
  function find(key) { return tenures.get(key) || clusters.get(key); }

  // regrouped is the key of what shows now a tenure or cluster key of the
  // drawing before showed: a cluster regroups as tenures slide out of the
  // window and new ones come; it is followed by its first tenure still
  // here.
  function regrouped(key, before) {
    if (key === null || !before.has(key) || clusters.has(key)) return key;
    for (const t of before.get(key).tenures) {
      if (tenures.has(t.key)) return clusterOf.get(t.key) || t.key;
    }
    return key;
  }

  // How long the redraws take (the browser test of many tenures reads
  // it): their count, and the durations of the last ones, in ms.
  const stats = { renders: 0, recentMS: [] };
  window.timelineStats = stats;
  function redraw() {
    if (!caughtUp) {
      scheduled = false;
      return;
    }
    const began = performance.now();
    render();
    stats.renders++;
    stats.recentMS.push(performance.now() - began);
    if (stats.recentMS.length > 100) stats.recentMS.shift();
  }

  function schedule() {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(redraw);
    }
  }

  function status(s) { $('status').textContent = s; }

  function details(t) {
    const box = $('details');
    if (!t) {
      shown = null;
      box.hidden = true;
      return;
    }
    shown = t.key;
    const list = $('details-list');
    list.replaceChildren();
    const row = (field, name, value) => {
      const dt = document.createElement('dt');
      dt.textContent = name;
      const dd = document.createElement('dd');
      dd.dataset.field = field;
      if (value instanceof Node) dd.appendChild(value); else dd.textContent = value;
      list.append(dt, dd);
    };
    for (const g of document.querySelectorAll('#timeline .bar, #timeline .cluster')) {
      g.classList.toggle('pinned', g.dataset.key === pinned);
    }
    if (t.cluster) {
      const first = t.tenures[0];
      const last = t.tenures[t.tenures.length - 1];
      row('lease', 'Lease', t.name);
      row('tenures', 'Tenures', t.tenures.length + ', too short to draw one by one: narrow the window (since) to see each');
      row('from', 'From', stamp(first.from !== null ? first.from : t.from));
      row('to', 'To', endOf(last) !== null ? stamp(endOf(last)) : 'now (live)');
      row('holder', 'Holders', counts(t.tenures.map((x) => x.holder), '(unknown)'));
      row('ended-by', 'Ended by', counts(t.tenures.map((x) => causeOf(x) || 'live')));
      if (t.tenures.some((x) => x.flapping)) row('flapping', 'Flapping', 'yes: granted anew more often than the threshold allows');
      box.hidden = false;
      return;
    }
    const now = serverNow();
    row('lease', 'Lease', t.name);
    row('holder', 'Holder', t.holder || '(unknown)');
    row('token', 'Token', t.token || '(unknown)');
    row('from', 'From', stamp(t.from));
    const to = endOf(t);
    row('to', 'To', to !== null ? stamp(to) : 'now (live)');
    row('held', 'Held', t.from !== null ? dur((to !== null ? to : now) - t.from) + (to === null ? ' so far' : '') : '(begin unknown)');
    if (t.durationMS) row('ttl', 'TTL', dur(t.durationMS));
    row('renewals', 'Renewals', String(t.renewals) + (to === null ? ' (counted at the end)' : ''));
    row('ended-by', 'Ended by', causeOf(t) || 'live (not ended)');
    if (t.reason) row('reason', 'Reason', t.reason);
    const held = holdEnd(t);
    if (held !== null) row('held-after', 'Held after', holdSummary(t, held, now));
    if (t.flapping) row('flapping', 'Flapping', 'yes: granted anew more often than the threshold allows');
    if (t.traceID) {
      if (jaeger && /^[0-9a-f]{16,32}$/.test(t.traceID)) {
        const a = document.createElement('a');
        a.href = jaeger + '/trace/' + encodeURIComponent(t.traceID);
        a.textContent = t.traceID;
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        a.id = 'trace-link';
        row('trace', 'Trace', a);
      } else {
        row('trace', 'Trace', t.traceID);
      }
    }
    box.hidden = false;
  }

  function barOf(ev) {
    const g = ev.target instanceof Element ? ev.target.closest('.bar, .cluster') : null;
    return g ? find(g.dataset.key) : null;
  }
  const chart = $('chart');
  chart.addEventListener('mouseover', (ev) => {
    const t = barOf(ev);
    if (t && pinned === null) details(t);
  });
  chart.addEventListener('focusin', (ev) => {
    const t = barOf(ev);
    if (t && pinned === null) details(t);
  });
  chart.addEventListener('click', (ev) => {
    const t = barOf(ev);
    pinned = t ? t.key : null;
    details(t);
  });
  chart.addEventListener('keydown', (ev) => {
    const t = barOf(ev);
    if (t && (ev.key === 'Enter' || ev.key === ' ')) {
      ev.preventDefault();
      pinned = t.key;
      details(t);
    }
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      pinned = null;
      details(null);
    }
  });
  window.addEventListener('resize', schedule);
  window.addEventListener('scroll', () => {
    // Drawn again once the viewport comes within half a screen of a lane
    // not drawn.
    const view = viewport(chart);
    if ((drawn.from > 0 && view.first - view.screen / 2 < drawn.from) || view.first + 1.5 * view.screen > drawn.to) schedule();
  }, { passive: true });

  legend();
  const qs = new URLSearchParams();
  if (prefix) qs.set('prefix', prefix);
  if (since) qs.set('since', since);
  if (limitParam) qs.set('limit', limitParam);

  // load reads the window's tenures, then follows what comes after; a
  // read refused while the server is busy is asked again.
  async function load() {
    let res;
    try {
      res = await fetch('api/tenures' + (qs.toString() ? '?' + qs : ''), { cache: 'no-store' });
    } catch (err) {
      status('unreachable (' + err + '); trying again…');
      setTimeout(load, 2000);
      return;
    }
    const body = await res.text();
    if (res.status === 503) {
      status('waiting: ' + body.trim());
      setTimeout(load, 1000 * (Number(res.headers.get('Retry-After')) || 1));
      return;
    }
    if (res.status === 422) {
      // The window holds more records than one read takes: follow them
      // all from its start instead, keeping at most the limit (it
      // stopped, showing nothing of a busy node's hour).
      limit = Number(limitParam) || DEFAULT_LIMIT;
      follow(null);
      return;
    }
    if (!res.ok) {
      document.body.dataset.state = 'stopped';
      status('stopped: ' + body.trim());
      return;
    }
    const reply = JSON.parse(body.replace(/"token":(\d+)/g, '"token":"$1"'));
    const now = ms(reply.now);
    if (now !== null) offset = now - Date.now();
    sinceMS = ms(reply.since);
    windowMS = Number(reply.window_ms) || 0;
    limit = Number(reply.limit) || Infinity;
    total = Number(reply.total) || 0;
    truncated = reply.truncated === true;
    // Added in the order of their activity, as the server kept them (the
    // reply is by name, then begin): add lets the first go.
    const tenuresRead = Array.isArray(reply.tenures) ? reply.tenures : [];
    tenuresRead.map((x, i) => [lastActive(x), i]).sort((a, b) => a[0] - b[0] || a[1] - b[1])
      .forEach(([, i]) => fromReply(tenuresRead[i], i));
    caughtUp = true;
    document.body.dataset.state = 'live';
    schedule();
    follow(String(reply.after || ''));
  }

  // follow opens /events after the record at after (the last one read):
  // the records stored since, then each new one; with after null, from
  // the window's start, the live leases first.
  function follow(after) {
    const eq = new URLSearchParams(qs);
    if (after !== null) eq.set('after', after);
    const events = new EventSource('events?' + eq);
    events.addEventListener('record', (e) => {
      fold(record(e.data));
      if (caughtUp) schedule();
    });
    events.addEventListener('caughtup', (e) => {
      const d = JSON.parse(e.data);
      const now = ms(d.now);
      if (now !== null) offset = now - Date.now();
      if (sinceMS === null) { // followed from the window's start
        sinceMS = ms(d.since);
        windowMS = Number(d.window_ms) || 0;
      }
      caughtUp = true;
      document.body.dataset.state = 'live';
      schedule();
    });
    events.addEventListener('ping', (e) => {
      const now = ms(JSON.parse(e.data).now);
      if (now !== null) offset = now - Date.now();
    });
    events.addEventListener('error', () => {
      document.body.dataset.state = events.readyState === EventSource.CLOSED ? 'stopped' : 'reconnecting';
      status(events.readyState === EventSource.CLOSED ? 'stopped: the server refused the stream (reload to retry)' : 'reconnecting…');
    });
    // Live bars grow with the clock.
    setInterval(() => {
      if (caughtUp && events.readyState === EventSource.OPEN) schedule();
    }, 1000);
  }
  load();
})();
