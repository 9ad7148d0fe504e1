'use strict';
// The dlock console's page: the state arrives as Server-Sent Events
// (events: "state" first, then "row", "gone", "ttl", "audit", "doctor");
// the page keeps each row with the moment it arrived, and counts TTLs down
// itself. It stays quick with a thousand rows: each row's element is kept
// with it (no search of the table), row events are applied once a frame,
// a renewal ("ttl") changes one text node, and the countdowns and
// timelines move on only for the rows in view.
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const tbody = document.querySelector('#locks tbody');
  const rows = new Map(); // key -> {row, recv, tr, ttl, ages, waited, drawn}
  let order = []; // the keys on the page, sorted
  const inView = new Set(); // the entries whose rows are in view
  let state = { revoke: false, auth: '' };
  let filter = '';
  const windowMs = 60000;
  // here resolves the console's own URLs: against the page's origin and
  // path, never its URL, which may carry credentials
  // (http://user:password@host/locks/), and a fetch of a URL with
  // credentials is refused. The path keeps a console mounted under a prefix.
  const here = (path) => new URL(path, location.origin + location.pathname).href;

  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  };
  const svg = (tag, attrs) => {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  };
  const secs = (ms) => ms < 0 ? 'no expiry' : ms >= 100000 ? Math.round(ms / 1000) + ' s' : (ms / 1000).toFixed(1) + ' s';
  const ago = (ms) => ms < 60000 ? Math.round(ms / 1000) + ' s' : ms < 3600000 ? Math.round(ms / 60000) + ' min' : (ms / 3600000).toFixed(1) + ' h';
  const clock = (t) => new Date(t).toLocaleTimeString();

  function setConn(text, cls) {
    const c = document.getElementById('conn');
    c.textContent = text;
    c.className = cls;
  }

  function put(row) {
    const entry = rows.get(row.key);
    if (entry) { entry.row = row; entry.recv = performance.now(); } else rows.set(row.key, { row, recv: performance.now() });
  }

  // Rows in view are counted down and redrawn; the others wait until
  // they come into view (by scrolling, or the filter).
  const seen = 'IntersectionObserver' in window ? new IntersectionObserver((changes) => {
    for (const c of changes) {
      const entry = rows.get(c.target.dataset.key);
      if (!entry || entry.tr !== c.target) continue;
      if (c.isIntersecting) {
        inView.add(entry);
        if (performance.now() - entry.drawn > 2000) drawTimeline(entry);
        tickRow(entry, performance.now(), Date.now());
      } else inView.delete(entry);
    }
  }) : null;

  function kind(r) {
    if (!r.held) return el('span', { class: 'free', text: r.waiters.length ? 'free, waiters queued' : 'free' });
    if (r.kind === 'semaphore') return r.holds.length + ' of ' + r.permits + ' permits';
    if (r.kind === 'election') return el('span', {}, 'election', el('br'), el('span', { class: 'muted', text: 'leader ' + r.leader }));
    if (r.kind === 'rwmutex') return 'read-write lock (' + r.mode + ')';
    return r.kind || 'lock (not dlock\'s)';
  }

  function holds(r) {
    if (!r.holds.length) return el('span', { class: 'free', text: '—' });
    const ul = el('ul', { class: 'holds' });
    for (const h of r.holds) {
      const li = el('li', {}, el('code', { text: h.holder }));
      if (h.owner) {
        const o = h.owner;
        li.append(' ', el('span', { class: 'owner', text: o.host + ' · pid ' + o.pid + ' · ' + o.program + (o.label ? ' · ' + o.label : '') }),
          ' ', el('span', { class: 'age', 'data-since': o.since }));
      }
      if (state.revoke) {
        const b = el('button', { type: 'button', class: 'revoke-btn', text: 'Revoke', 'aria-label': 'Revoke ' + h.holder + ' on ' + r.key });
        b.addEventListener('click', () => openRevoke(r.key, h.holder));
        li.append(' ', b);
      }
      ul.append(li);
    }
    return ul;
  }

  function waiters(r) {
    if (!r.waiters.length) return el('span', { class: 'muted', text: 'none' });
    const ol = el('ol', { class: 'waiters' });
    r.waiters.forEach((w) => ol.append(el('li', {}, el('code', { text: w.id }), ' ', el('span', { class: 'waited muted', 'data-waited': w.waited_ms }))));
    return ol;
  }

  // timeline draws the key's holds over the last minute, as the
  // torture timelines do: a bar per hold, coloured by how it ended.
  function timeline(r) {
    const now = Date.now(), from = now - windowMs, spans = [], open = new Map();
    for (const e of r.history) {
      if (e.kind === 'grant' || e.kind === 'hand-off') {
        if (e.kind === 'hand-off') {
          const prev = e.note.replace(/^from /, '');
          if (open.has(prev)) { spans.push({ ...open.get(prev), end: e.at, how: 'hand-off' }); open.delete(prev); }
        }
        open.set(e.holder, { holder: e.holder, start: e.at });
      } else if (open.has(e.holder)) {
        spans.push({ ...open.get(e.holder), end: e.at, how: e.kind });
        if (e.kind !== 'revoke') open.delete(e.holder);
      } else if (e.kind !== 'revoke') {
        spans.push({ holder: e.holder, start: from, end: e.at, how: e.kind });
      }
    }
    for (const h of r.holds) {
      const s = open.get(h.holder);
      spans.push({ holder: h.holder, start: s ? s.start : from, end: now, how: 'grant' });
    }
    const box = svg('svg', { class: 'timeline', viewBox: '0 0 240 30', preserveAspectRatio: 'none', role: 'img',
      'aria-label': 'holds in the last minute' });
    const lanes = [];
    for (const s of spans.sort((a, b) => a.start - b.start)) {
      if (s.end < from) continue;
      let lane = lanes.findIndex((end) => end <= s.start);
      if (lane < 0) { lane = lanes.length; lanes.push(0); }
      lanes[lane] = s.end;
      const x = Math.min(237, Math.max(0, (s.start - from) / windowMs * 240)), w = Math.max(3, (s.end - Math.max(s.start, from)) / windowMs * 240);
      const rect = svg('rect', { x: x.toFixed(1), y: 2 + (lane % 3) * 9, width: w.toFixed(1), height: 8, class: s.how });
      rect.append(svg('title', {}));
      rect.firstChild.textContent = s.holder + ': ' + clock(s.start) + ' – ' + (s.how === 'grant' ? 'now' : s.how + ' ' + clock(s.end));
      box.append(rect);
    }
    return box;
  }

  // history lists the key's events, newest first, folded.
  function history(r) {
    if (!r.history.length) return null;
    const list = el('ol', { class: 'history' });
    for (const e of r.history.slice().reverse()) {
      list.append(el('li', { text: clock(e.at) + ' ' + e.kind + ' ' + e.holder + (e.fence ? ' fence ' + e.fence : '') + (e.note ? ' (' + e.note + ')' : '') }));
    }
    return el('details', {}, el('summary', { text: r.history.length + (r.history.length === 1 ? ' event' : ' events') }), list);
  }

  function rowElement(r) {
    const cell = (label, ...kids) => el('td', { 'data-label': label }, ...kids);
    const th = el('th', { scope: 'row' }, el('code', { class: 'key', text: r.key }));
    if (r.error) th.append(el('div', { class: 'err', text: r.error }));
    const tr = el('tr', { 'data-key': r.key },
      th,
      cell('Kind', kind(r)),
      cell('Holders', holds(r)),
      cell('TTL', el('span', { class: 'ttl' })),
      cell('Fence', el('span', { class: 'num', text: r.fence ? String(r.fence) : '—' })),
      cell('Waiters', waiters(r)),
      cell('Last minute', el('div', { class: 'tl' }, timeline(r)), history(r)));
    for (const c of tr.cells) c.sig = c.innerHTML; // as built, before tick fills it in
    return tr;
  }

  // patch brings a row on the page up to date cell by cell. A cell whose
  // content is unchanged stays, with the focus, a click under way and an
  // open history in it (a renewal updates a row every third of its TTL); a
  // changed one is replaced, keeping its history open and the focus on
  // the same control if it is still there.
  function patch(old, tr) {
    const name = (e) => e.getAttribute('aria-label') || e.tagName;
    [...tr.cells].forEach((cell, i) => {
      const was = old.cells[i];
      if (was.sig === cell.sig) return;
      const open = was.querySelector('details')?.open;
      const focus = was.contains(document.activeElement) ? name(document.activeElement) : null;
      was.replaceWith(cell);
      if (open && cell.querySelector('details')) cell.querySelector('details').open = true;
      const again = focus && [...cell.querySelectorAll('button, summary')].find((e) => name(e) === focus);
      if (again) again.focus();
    });
    old.hidden = tr.hidden;
  }

  // where returns the index of key in order, or where it would go.
  function where(key) {
    let lo = 0, hi = order.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (order[mid] < key) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // build gives entry the element of its row (patching the one it has),
  // and keeps the parts that tick changes; it returns a new element.
  function build(entry) {
    const tr = rowElement(entry.row), key = entry.row.key;
    tr.hidden = filter !== '' && !key.toLowerCase().includes(filter);
    const old = entry.tr;
    if (old) patch(old, tr); else { entry.tr = tr; if (seen) seen.observe(tr); else inView.add(entry); }
    const e = entry.tr;
    entry.ttl = e.querySelector('.ttl');
    entry.ages = [...e.querySelectorAll('[data-since]')];
    entry.waited = [...e.querySelectorAll('[data-waited]')];
    entry.drawn = performance.now();
    tickRow(entry, performance.now(), Date.now());
    return old ? null : tr;
  }

  function remove(key) {
    const entry = rows.get(key);
    if (!entry) return;
    rows.delete(key);
    inView.delete(entry);
    if (entry.tr) { if (seen) seen.unobserve(entry.tr); entry.tr.remove(); }
    const i = where(key);
    if (order[i] === key) order.splice(i, 1);
  }

  // render puts one row on the page, or updates it.
  function render(key) {
    const entry = rows.get(key);
    const tr = build(entry);
    if (!tr) return;
    const i = where(key);
    const next = rows.get(order[i]);
    tbody.insertBefore(tr, next ? next.tr : null);
    order.splice(i, 0, key);
  }

  // renderAll brings the table up to the rows known, in key order: built
  // in one fragment on a first load, patching the rows already on the
  // page on a reconnect (which keeps the focus).
  function renderAll(fresh) {
    for (const k of [...order]) if (!fresh.has(k)) remove(k);
    const keys = [...fresh.keys()].sort();
    if (!order.length) {
      const frag = document.createDocumentFragment();
      for (const k of keys) { put(fresh.get(k)); frag.append(build(rows.get(k))); }
      tbody.append(frag);
      order = keys;
    } else {
      for (const k of keys) { put(fresh.get(k)); render(k); }
    }
    count();
  }

  // Row events are applied once a frame, the last of each key's.
  const pending = new Map(); // key -> row, or null: gone
  let flushing = false;
  function later(key, row) {
    pending.set(key, row);
    if (flushing) return;
    flushing = true;
    requestAnimationFrame(flush);
    setTimeout(flush, 250); // a tab in the background has no frames
  }
  function flush() {
    if (!flushing) return;
    flushing = false;
    for (const [k, r] of pending) { if (r) { put(r); render(k); } else remove(k); }
    pending.clear();
    count();
  }

  let problems = [], cut = null;
  function count() {
    document.getElementById('count').textContent = '(' + rows.size + (cut ? ', list cut short' : '') + ')';
    document.getElementById('empty').hidden = rows.size > 0 || problems.length > 0;
    matches();
  }

  // matches says when the filter hides every row.
  function matches() {
    const none = filter !== '' && rows.size > 0 && ![...tbody.children].some((tr) => !tr.hidden);
    const box = document.getElementById('no-match');
    box.textContent = 'No key shown matches the filter.' + (cut ? ' The list is cut short: a key past the limit is not searched; narrow the pattern to see it.' : '');
    box.hidden = !none;
  }

  // renderCut says that the list stops at the console's limit, how many
  // keys match, and how to see the others.
  function renderCut(c) {
    cut = c || null;
    const box = document.getElementById('cut');
    box.hidden = !cut;
    if (cut) {
      const n = (x) => x.toLocaleString('en');
      box.replaceChildren(
        el('p', {}, el('strong', { text: 'The list is cut short.' }), ' ' + n(cut.found) + (cut.at_least ? ' or more' : '') + ' keys match ',
          el('code', { text: state.pattern || '*' }), '; this console shows at most the first ' + n(cut.limit) + ' of each node\'s (some may be keys of another kind than a lock).'),
        el('p', {}, 'To see the others, watch a narrower pattern (', el('code', { text: "dlock ui 'orders:*'" }), ', or Config.Pattern) or raise the limit (',
          el('code', { text: 'dlock ui --limit ' + (cut.at_least ? cut.found : Math.ceil(cut.found / 1000) * 1000) }), ', or Config.Limit). The filter searches the keys shown only.'));
    }
    count();
  }

  // renderProblems says what Redis would not let the console read: the
  // table is then not the whole truth.
  function renderProblems(ps) {
    problems = ps || [];
    const box = document.getElementById('problems');
    box.replaceChildren(...(problems.length ? [el('p', {}, el('strong', { text: 'Redis could not be read; the table may be missing locks:' }))] : []),
      ...problems.map((p) => el('p', { text: p })));
    box.hidden = problems.length === 0;
    count();
  }

  // drawTimeline draws a row's timeline again, as time moves on.
  function drawTimeline(entry) {
    const box = entry.tr && entry.tr.querySelector('.tl');
    if (box) box.replaceChildren(timeline(entry.row));
    entry.drawn = performance.now();
  }
  function redraw() { for (const entry of inView) drawTimeline(entry); }

  const setText = (e, s) => { if (e.textContent !== s) e.textContent = s; };

  // tickRow moves a row's countdown and ages on.
  function tickRow(entry, now, wall) {
    const gone = now - entry.recv, r = entry.row;
    if (r.held) {
      const left = r.ttl_ms < 0 ? -1 : Math.max(0, r.ttl_ms - gone);
      setText(entry.ttl, secs(left));
      const low = left >= 0 && left < 2000;
      if (entry.ttl.classList.contains('low') !== low) entry.ttl.classList.toggle('low', low);
    } else setText(entry.ttl, '—');
    for (const a of entry.ages) setText(a, 'held ' + ago(wall - Number(a.dataset.since)));
    for (const w of entry.waited) setText(w, 'waited ' + secs(Number(w.dataset.waited) + gone));
  }

  // tick moves the countdowns in view on.
  function tick() {
    const now = performance.now(), wall = Date.now();
    for (const entry of inView) tickRow(entry, now, wall);
  }

  // renewed takes a "ttl" event's TTLs: nothing but a countdown changes.
  function renewed(ttls) {
    const now = performance.now();
    for (const [k, ms] of Object.entries(ttls)) {
      const r = pending.get(k) || rows.get(k)?.row;
      if (!r) continue;
      r.ttl_ms = ms;
      const entry = rows.get(k);
      if (entry && entry.row === r) { entry.recv = now; if (inView.has(entry)) tickRow(entry, now, Date.now()); }
    }
  }

  function renderDoctor(d) {
    const box = document.getElementById('doctor');
    box.replaceChildren();
    for (const f of d.findings || []) {
      box.append(el('div', { class: 'finding' },
        el('p', {}, el('strong', { text: f.check }), ' — ' + f.row),
        el('p', { text: f.what }), el('p', {}, 'Keys: ', el('code', { text: (f.keys || []).join(', ') })),
        f.basis ? el('p', { class: 'muted', text: 'Judged as: ' + f.basis }) : null,
        el('p', {}, el('strong', { text: 'Fix: ' }), f.fix)));
    }
    for (const n of d.notes || []) box.append(el('p', { class: 'muted', text: n }));
    if (!box.children.length) box.append(el('p', { text: 'No findings: none of the Redis guidance\'s troubleshooting rows applies.' }));
  }

  function renderAudit(entries) {
    const box = document.getElementById('audit');
    if (!entries || !entries.length) { box.replaceChildren(el('p', { text: 'No revocation recorded.' })); return; }
    const t = el('table', {}, el('caption', { class: 'sr-only', text: 'The audit stream, newest first' }),
      el('thead', {}, el('tr', {}, ...['When', 'Event', 'Key', 'Holder', 'Fence', 'By', 'Reason', 'Owner', 'Outcome'].map((h) => el('th', { scope: 'col', text: h })))));
    const body = el('tbody');
    for (const a of entries) {
      const f = a.fields;
      body.append(el('tr', {}, ...[new Date(a.at).toLocaleString(), f.event, f.key, f.holder, f.fence, f.by, f.reason, f.owner || '', f.how || (f.grace_ms ? 'grace ' + secs(Number(f.grace_ms)) : '')]
        .map((v, i) => el('td', { 'data-label': ['When', 'Event', 'Key', 'Holder', 'Fence', 'By', 'Reason', 'Owner', 'Outcome'][i], text: v || '' }))));
    }
    t.append(body);
    box.replaceChildren(t);
  }

  // The revoke dialog.
  const dialog = document.getElementById('revoke-dialog');
  let target = null;
  function openRevoke(key, holder) {
    target = { key, holder };
    document.getElementById('revoke-key').textContent = key;
    document.getElementById('revoke-holder').textContent = holder;
    document.getElementById('revoke-result').textContent = '';
    document.getElementById('revoke-token-field').hidden = state.auth !== 'token';
    document.getElementById('revoke-confirm').disabled = false;
    sizeReason();
    dialog.showModal();
    document.getElementById('revoke-reason').focus();
  }
  document.getElementById('revoke-cancel').addEventListener('click', () => dialog.close());
  // The reason is limited in bytes, as the library counts it (Revocation:
  // 512 bytes), not in characters: a "€" takes three.
  const reasonMax = 512, utf8 = new TextEncoder();
  function sizeReason() {
    const input = document.getElementById('revoke-reason'), n = utf8.encode(input.value).length;
    document.getElementById('revoke-reason-size').textContent = n + ' of ' + reasonMax + ' bytes';
    input.setCustomValidity(n > reasonMax ? 'At most ' + reasonMax + ' bytes of UTF-8: this reason has ' + n + '.' : '');
  }
  document.getElementById('revoke-reason').addEventListener('input', sizeReason);
  document.getElementById('revoke-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const result = document.getElementById('revoke-result');
    const grace = Number(document.getElementById('revoke-grace').value || 0);
    const headers = { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf };
    const token = document.getElementById('revoke-token').value;
    if (state.auth === 'token' && token) headers.Authorization = 'Bearer ' + token;
    document.getElementById('revoke-confirm').disabled = true;
    result.textContent = 'Revoking… the holder has ' + grace + ' s to let go.';
    try {
      const res = await fetch(here('api/revoke'), { method: 'POST', headers, credentials: 'same-origin',
        body: JSON.stringify({ key: target.key, holder: target.holder, reason: document.getElementById('revoke-reason').value, grace_ms: grace * 1000 }) });
      const body = await res.json();
      result.textContent = res.ok
        ? 'Revoked ' + body.Holds.join(', ') + ': ' + (body.Removed ? 'removed after the grace' : 'the holder let go') + '; fence now ' + body.Fence + '.'
        : 'Refused (' + res.status + '): ' + body.error;
    } catch (e) {
      result.textContent = 'Failed: ' + e;
    }
    document.getElementById('revoke-confirm').disabled = false;
  });

  document.getElementById('filter').addEventListener('input', (e) => {
    filter = e.target.value.toLowerCase();
    for (const tr of tbody.children) tr.hidden = filter !== '' && !tr.dataset.key.toLowerCase().includes(filter);
    matches();
  });

  function connect() {
    const es = new EventSource(here('events'));
    es.addEventListener('state', (e) => {
      state = JSON.parse(e.data);
      pending.clear();
      renderAll(new Map(state.rows.map((r) => [r.key, r])));
      renderDoctor({ findings: state.findings, notes: state.notes });
      renderProblems(state.problems);
      renderCut(state.cut);
      renderAudit(state.audit);
      document.getElementById('meta').textContent = 'Redis ' + (state.nodes || []).join(', ') + ' · keys ' + state.pattern + ' · ' + (state.revoke ? 'revoke enabled' : 'read-only');
      setConn('live', 'live');
    });
    es.addEventListener('row', (e) => { const r = JSON.parse(e.data); later(r.key, r); });
    es.addEventListener('gone', (e) => later(JSON.parse(e.data), null));
    es.addEventListener('ttl', (e) => renewed(JSON.parse(e.data)));
    es.addEventListener('audit', (e) => renderAudit(JSON.parse(e.data)));
    es.addEventListener('doctor', (e) => renderDoctor(JSON.parse(e.data)));
    es.addEventListener('problems', (e) => renderProblems(JSON.parse(e.data)));
    es.addEventListener('cut', (e) => renderCut(JSON.parse(e.data)));
    es.onerror = () => setConn('reconnecting…', 'down');
    es.onopen = () => setConn('live', 'live');
  }
  connect();
  setInterval(tick, 200);
  setInterval(redraw, 2000);
})();
