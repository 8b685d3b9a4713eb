// hookrelay console: a single page over the collector's admin JSON API (docs/ADMIN_API.md).
//
// Plain DOM, no framework, no build step, nothing fetched but same-origin /admin/v1/... calls.
// Data is never parsed as HTML: every node is built with createElement and textContent, and no
// inline handler or style is used, so the collector's Content-Security-Policy
// (default-src 'self') holds.
//
// The console is several classic scripts that index.html loads in order (defer) and that share
// one global scope: core.js (this file: constants, DOM helpers, the status line, the API client,
// the session, form helpers), then one file per page (setup.js with setup_urls.js, sources.js,
// destinations.js, dead_letters.js, deletions.js, audiences.js), then main.js (login, routing,
// start).
//
// Routes (hash): #/login, #/setup (new destination), #/setup/<id> (edit), #/sources,
// #/destinations, #/dead-letters, #/deletions, #/audiences. The admin token lives in
// sessionStorage only.
'use strict';

var API = '/admin/v1';
var TOKEN_KEY = 'hookrelay.adminToken';
var DEFAULT_TYPE = {
  type: 'webhooks', name: 'Webhooks', description: '', maxUrls: 5, maxHeadersPerUrl: 5,
  reservedHeaders: ['Content-Type', 'User-Agent', 'X-Signature', 'Content-Length', 'Host',
    'Idempotency-Key']
};
var TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;  // RFC 7230 token
var ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
var MAX_URL_LENGTH = 2048;

// ---------------------------------------------------------------------------------------------
// DOM helpers

var uidCounter = 0;
function uid(prefix) {
  uidCounter += 1;
  return (prefix || 'f') + '-' + uidCounter;
}

// h('button', {type: 'button', class: 'x', on: {click: fn}}, 'text', child, ...)
function h(tag, props) {
  var el = document.createElement(tag);
  if (props) {
    Object.keys(props).forEach(function (key) {
      var value = props[key];
      if (value === undefined || value === null || value === false) return;
      if (key === 'class') {
        el.className = value;
      } else if (key === 'text') {
        el.textContent = value;
      } else if (key === 'for') {
        el.htmlFor = value;
      } else if (key === 'on') {
        Object.keys(value).forEach(function (name) { el.addEventListener(name, value[name]); });
      } else if (key === 'dataset') {
        Object.keys(value).forEach(function (name) { el.dataset[name] = value[name]; });
      } else if (key === 'value' || key === 'checked' || key === 'disabled' ||
                 key === 'hidden' || key === 'readOnly' || key === 'selected') {
        el[key] = value;
      } else {
        el.setAttribute(key, value === true ? '' : String(value));
      }
    });
  }
  for (var i = 2; i < arguments.length; i++) appendOne(el, arguments[i]);
  return el;
}

// append(el, child, ...): strings become text nodes; arrays are flattened; null is skipped.
function append(el) {
  for (var i = 1; i < arguments.length; i++) appendOne(el, arguments[i]);
}

function appendOne(el, child) {
  if (child === undefined || child === null || child === false) return;
  if (Array.isArray(child)) {
    child.forEach(function (c) { appendOne(el, c); });
  } else if (child instanceof Node) {
    el.appendChild(child);
  } else {
    el.appendChild(document.createTextNode(String(child)));
  }
}

// A check that shows a hint on blur must not move the button being clicked: blur comes with
// pointerdown, and a line appearing above the button would make the pointerup miss it. So the
// check waits until the pointer is released (and the click delivered).
var pointerDown = false;
document.addEventListener('pointerdown', function () { pointerDown = true; }, true);
document.addEventListener('pointerup', function () { pointerDown = false; }, true);
document.addEventListener('pointercancel', function () { pointerDown = false; }, true);
function afterPointer(fn) {
  if (!pointerDown) {
    fn();
    return;
  }
  var done = false;
  function run() {
    if (done) return;
    done = true;
    setTimeout(fn, 0);
  }
  document.addEventListener('pointerup', run, {once: true});
  document.addEventListener('pointercancel', run, {once: true});
  setTimeout(run, 2000);
}

function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

function enc(s) {
  return encodeURIComponent(s);
}

// int64 values arrive as strings in protobuf JSON; absent means 0.
function num(v) {
  var n = Number(v || 0);
  return isFinite(n) ? n : 0;
}

// Local time as YYYY-MM-DD HH:MM:SS (unambiguous in every locale); the UTC ISO form goes in
// the title of <time> elements.
function formatTime(value) {
  if (!value) return '';
  var d = typeof value === 'number' ? new Date(value) : new Date(String(value));
  if (isNaN(d.getTime())) return String(value);
  function p(n) { return (n < 10 ? '0' : '') + n; }
  return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' +
    p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
}

function isoTime(value) {
  var d = typeof value === 'number' ? new Date(value) : new Date(String(value));
  return isNaN(d.getTime()) ? '' : d.toISOString();
}

function timeEl(value) {
  if (!value) return h('span', {class: 'muted', text: '—'});
  var iso = isoTime(value);
  return h('time', {datetime: iso || null, title: iso || null, text: formatTime(value)});
}

function maskKey(key) {
  if (key.length <= 10) return '•'.repeat(key.length);
  return key.slice(0, 6) + '••••••••' + key.slice(-4);
}

function fileOf(managedBy) {
  return managedBy && managedBy.indexOf('file:') === 0 ? managedBy.slice(5) : '';
}

// ---------------------------------------------------------------------------------------------
// Status messages (one aria-live region for the whole page)

var statusTimer = null;
var carryStatus = false;  // keep the message over the next navigation (route clears it)
function announce(text, kind, carry) {
  var status = document.getElementById('status');
  carryStatus = !!carry;
  status.className = 'status' + (kind ? ' status-' + kind : '');
  status.textContent = text;
  if (statusTimer) clearTimeout(statusTimer);
  statusTimer = null;
  if (text && kind !== 'error') {
    statusTimer = setTimeout(function () {
      if (status.textContent === text) status.textContent = '';
    }, 8000);
  }
}

// An error box (role=alert) at the top of a form or page.
function errorBox(id) {
  var box = h('div', {class: 'error-box', role: 'alert', tabindex: '-1', id: id || null,
    hidden: true});
  return {
    el: box,
    show: function (title, message, items, info) {
      clear(box);
      box.className = 'error-box' + (info ? ' info' : '');
      append(box, h('p', {class: 'error-title', text: title}));
      if (message) append(box, h('p', {class: 'error-message', text: message}));
      if (items && items.length) {
        append(box, h('ul', null, items.map(function (t) { return h('li', {text: t}); })));
      }
      box.hidden = false;
    },
    hide: function () {
      clear(box);
      box.hidden = true;
    }
  };
}

// The server's message, and its field violations as a list (the message alone when it says
// the same as the list).
function showApiError(box, e, title) {
  if (e.authFailure) return;
  var items = (e.violations || []).map(function (v) {
    return (v.field ? v.field + ': ' : '') + (v.description || '');
  });
  var repeated = items.length && items.every(function (t) { return e.message.indexOf(t) >= 0; });
  box.show(title || 'The collector refused the request', e.message + codeSuffix(e),
    repeated ? [] : items);
}

function codeSuffix(e) {
  return e.code ? ' (' + e.code + (e.status ? ', HTTP ' + e.status : '') + ')' : '';
}

// ---------------------------------------------------------------------------------------------
// API client

function ApiError(status, code, message, violations) {
  this.status = status;
  this.code = code;
  this.message = message;
  this.violations = violations || [];
  this.authFailure = false;
}

function signedIn() {
  return sessionStorage.getItem(TOKEN_KEY) !== null;
}

function api(method, path, body, options) {
  var headers = {'Accept': 'application/json'};
  var token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers['Authorization'] = 'Bearer ' + token;
  var init = {method: method, headers: headers, credentials: 'same-origin', cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  return fetch(API + path, init).then(function (resp) {
    return resp.text().then(function (text) {
      var data = null;
      if (text) {
        try { data = JSON.parse(text); } catch (ignored) { data = null; }
      }
      if (resp.ok) return data || {};
      var err = (data && data.error) || {};
      var e = new ApiError(resp.status, err.code || '',
        err.message || (text && !data ? text.slice(0, 300) : '') || resp.statusText ||
          ('HTTP ' + resp.status),
        Array.isArray(err.fieldViolations) ? err.fieldViolations : []);
      if ((resp.status === 401 || resp.status === 403) && !(options && options.noSignOut)) {
        e.authFailure = true;
        signOut(e.message + codeSuffix(e));
      }
      throw e;
    });
  }, function (networkError) {
    throw new ApiError(0, 'UNAVAILABLE',
      'Cannot reach the collector (' + networkError.message + ')', []);
  });
}

// Every page of a list call (bounded).
function listAll(path, field) {
  var out = [];
  function page(token, n) {
    var q = '?page_size=1000' + (token ? '&page_token=' + enc(token) : '');
    return api('GET', path + q).then(function (resp) {
      out = out.concat(resp[field] || []);
      if (resp.nextPageToken && n < 50) return page(resp.nextPageToken, n + 1);
      return out;
    });
  }
  return page('', 0);
}

var catalogPromise = null;
function loadCatalog() {
  if (!catalogPromise) {
    catalogPromise = api('GET', '/catalog').catch(function (e) {
      catalogPromise = null;
      throw e;
    });
  }
  return catalogPromise;
}

var loginMessage = '';
var loginTitle = '';
var loginInfo = false;  // a sign-out the user asked for: not an error
var pendingRoute = '';
// Back to the sign-in form with the server's message. Several calls of a page may be refused
// at once: only the first one navigates. The page is offered again after signing in.
function signOut(message, title) {
  if (!signedIn()) {
    if (!loginMessage) loginMessage = message || '';
    return;
  }
  sessionStorage.removeItem(TOKEN_KEY);
  catalogPromise = null;
  loginMessage = message || '';
  loginTitle = title || 'The collector no longer accepts this session; sign in again';
  loginInfo = !!title;
  if (location.hash !== '#/login') {
    pendingRoute = location.hash;
    location.hash = '#/login';
  } else {
    route();
  }
}

// ---------------------------------------------------------------------------------------------
// Form fields: label, input, hint and an error line tied to the input by aria-describedby.

function field(labelText, input, hintText, extra) {
  if (!input.id) input.id = uid('in');
  var errId = input.id + '-error';
  var err = h('p', {class: 'field-error', id: errId, hidden: true});
  var hint = hintText ? h('p', {class: 'field-hint', id: input.id + '-hint', text: hintText})
    : null;
  input.setAttribute('aria-describedby', (hint ? hint.id + ' ' : '') + errId);
  var wrap = h('div', {class: 'field'},
    h('label', {for: input.id, text: labelText}), extra ? h('div', {class: 'input-row'},
      input, extra) : input, hint, err);
  return {
    wrap: wrap, input: input, err: err,
    setError: function (text, source) { setError(input, err, text, source); },
    source: function () { return err.hidden ? '' : err.dataset.source; }
  };
}

// source: 'client' (a hint from the console's own checks) or 'server' (the collector's answer).
function setError(input, err, text, source) {
  if (!text) {
    err.textContent = '';
    err.hidden = true;
    delete err.dataset.source;
    if (input) input.removeAttribute('aria-invalid');
    return;
  }
  if (source === 'server' && !err.hidden && err.dataset.source === 'server') {
    err.textContent = err.textContent + '; ' + text;
  } else {
    err.textContent = text;
  }
  err.dataset.source = source;
  err.className = 'field-error ' + (source === 'server' ? 'from-server' : 'from-client');
  err.hidden = false;
  if (input) input.setAttribute('aria-invalid', 'true');
}

// A group-level error line (fieldset-wide: sources, urls, one URL's headers).
function groupError() {
  var err = h('p', {class: 'field-error', id: uid('err'), hidden: true});
  return {
    el: err,
    set: function (text, source) { setError(null, err, text, source); }
  };
}

function switchInput(id, labelText, checked, hiddenSuffix) {
  var input = h('input', {type: 'checkbox', role: 'switch', id: id || uid('sw'),
    class: 'switch-input', checked: !!checked});
  var label = h('label', {class: 'switch', for: input.id},
    input, h('span', {class: 'switch-track', 'aria-hidden': 'true'}),
    h('span', {class: 'switch-text', text: labelText}),
    hiddenSuffix ? h('span', {class: 'visually-hidden', text: ' ' + hiddenSuffix}) : null);
  return {label: label, input: input};
}

function copyButton(getText, labelText) {
  var btn = h('button', {type: 'button', class: 'button-small copy-key', text: labelText || 'Copy'});
  btn.addEventListener('click', function () {
    var text = getText();
    copyText(text).then(function () {
      announce('Copied to the clipboard.', 'ok');
    }, function () {
      announce('Could not copy; select the text and copy it by hand.', 'error');
    });
  });
  return btn;
}

function copyText(text) {
  if (navigator.clipboard && navigator.clipboard.writeText) {
    return navigator.clipboard.writeText(text).catch(function () { return legacyCopy(text); });
  }
  return legacyCopy(text);
}

function legacyCopy(text) {
  return new Promise(function (resolve, reject) {
    var area = h('textarea', {class: 'offscreen', readonly: true, 'aria-hidden': 'true'});
    area.value = text;
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand('copy'); } catch (ignored) { ok = false; }
    document.body.removeChild(area);
    if (ok) { resolve(); } else { reject(new Error('copy refused')); }
  });
}

function pageHeading(text) {
  return h('h1', {tabindex: '-1', class: 'page-title', text: text});
}

function loading(text) {
  return h('p', {class: 'loading', text: text || 'Loading…'});
}

function table(caption, headers, rows, options) {
  var t = h('table', {class: 'data-table' + (options && options.cls ? ' ' + options.cls : ''),
    id: (options && options.id) || null});
  if (caption) append(t, h('caption', {class: options && options.captionHidden ?
    'visually-hidden' : null, text: caption}));
  append(t, h('thead', null, h('tr', null, headers.map(function (x) {
    return h('th', {scope: 'col', text: x});
  }))));
  append(t, h('tbody', null, rows));
  return h('div', {class: 'table-wrap'}, t);
}
