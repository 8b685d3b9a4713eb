// hookrelay console: a single page over the collector's admin JSON API (docs/ADMIN_API.md).
//
// Plain DOM, no framework, no build step, nothing fetched but same-origin /admin/v1/... calls.
// Data is never parsed as HTML: every node is built with createElement and textContent, and no
// inline handler or style is used, so the collector's Content-Security-Policy
// (default-src 'self') holds.
//
// Routes (hash): #/login, #/setup (new destination), #/setup/<id> (edit), #/sources,
// #/destinations, #/dead-letters, #/deletions, #/audiences. The admin token lives in
// sessionStorage only.
(function () {
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

  // ---------------------------------------------------------------------------------------------
  // Router

  var views = {
    login: viewLogin,
    setup: viewSetup,
    sources: viewSources,
    destinations: viewDestinations,
    'dead-letters': viewDeadLetters,
    deletions: viewDeletions,
    audiences: viewAudiences
  };
  var titles = {
    login: 'Sign in', setup: 'Set up a destination', sources: 'Sources',
    destinations: 'Destinations', 'dead-letters': 'Dead letters', deletions: 'Deletion requests',
    audiences: 'Audiences'
  };
  var firstRender = true;

  function route() {
    var m = /^#\/([a-z-]+)(?:\/(.*))?$/.exec(location.hash || '');
    var name = m ? m[1] : '';
    var arg = m && m[2] ? decodeURIComponent(m[2]) : '';
    if (!views[name]) {
      location.replace(signedIn() ? '#/setup' : '#/login');
      return;
    }
    if (name !== 'login' && !signedIn()) {
      pendingRoute = location.hash;
      location.replace('#/login');
      return;
    }
    var nav = document.getElementById('nav');
    nav.hidden = !signedIn();
    document.getElementById('sign-out').hidden = !signedIn();
    Array.prototype.forEach.call(nav.querySelectorAll('a'), function (a) {
      if (a.dataset.route === name) {
        a.setAttribute('aria-current', 'page');
      } else {
        a.removeAttribute('aria-current');
      }
    });
    document.title = (name === 'setup' && arg ? 'Edit destination ' + arg : titles[name]) +
      ' · hookrelay console';
    // A message belongs to the page it was said on, unless it announced this navigation.
    if (!carryStatus) announce('');
    carryStatus = false;
    var main = document.getElementById('main');
    var view = h('div', {class: 'view view-' + name});
    clear(main);
    main.appendChild(view);
    views[name](view, arg);
    if (!firstRender) {
      var h1 = view.querySelector('h1');
      if (h1) h1.focus();
    }
    firstRender = false;
  }

  // ---------------------------------------------------------------------------------------------
  // Login

  function viewLogin(view) {
    var box = errorBox('login-error');
    var token = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off',
      spellcheck: 'false'});
    var tokenField = field('Admin token', token,
      'The token in the collector\'s --admin_token_file. Leave it empty when the collector runs ' +
      'without a token (it then answers on loopback only). Kept in this tab only.');
    var submit = h('button', {type: 'submit', class: 'button-primary', id: 'sign-in',
      text: 'Sign in'});
    var form = h('form', {class: 'card narrow', novalidate: true, 'aria-labelledby': 'login-title'},
      h('h1', {id: 'login-title', tabindex: '-1', class: 'page-title', text: 'Sign in'}),
      h('p', {class: 'lead', text: 'Manage the sources and webhook destinations of this collector.'}),
      box.el, tokenField.wrap, h('div', {class: 'actions'}, submit));
    if (loginMessage) {
      box.show(loginTitle || 'Signed out', loginMessage, null, loginInfo);
      loginMessage = '';
      loginTitle = '';
    }
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      box.hide();
      submit.disabled = true;
      sessionStorage.setItem(TOKEN_KEY, token.value.trim());
      catalogPromise = null;
      api('GET', '/catalog', undefined, {noSignOut: true}).then(function () {
        var next = pendingRoute && pendingRoute !== '#/login' ? pendingRoute : '#/setup';
        pendingRoute = '';
        announce('Signed in.', 'ok', true);
        location.hash = next;
      }, function (e) {
        sessionStorage.removeItem(TOKEN_KEY);
        submit.disabled = false;
        var title = e.status === 401 ? 'The collector refused this token' :
          e.status === 403 ? 'The collector refused this client' : 'Could not sign in';
        box.show(title, e.message + codeSuffix(e));
        box.el.focus();
      });
    });
    append(view, form);
    token.focus();
  }

  // ---------------------------------------------------------------------------------------------
  // Setup flow: catalog → sources → URLs and headers → secret → id and enable → save → test.

  function viewSetup(view, editId) {
    append(view, pageHeading(editId ? 'Edit destination ' + editId : 'Set up a destination'));
    var waiting = loading();
    append(view, waiting);
    var box = errorBox();
    append(view, box.el);
    Promise.all([
      loadCatalog(),
      listAll('/sources', 'sources'),
      editId ? api('GET', '/destinations/' + enc(editId)) : Promise.resolve(null)
    ]).then(function (r) {
      waiting.remove();
      buildSetup(view, r[0], r[1], r[2]);
    }, function (e) {
      waiting.remove();
      showApiError(box, e, 'Could not load the setup page');
    });
  }

  function buildSetup(view, catalog, sources, existing) {
    var types = (catalog.destinationTypes && catalog.destinationTypes.length) ?
      catalog.destinationTypes : [DEFAULT_TYPE];
    var editing = existing;  // the stored destination once saved (PATCH from then on)
    var chosenType = existing ? findType(existing.type || 'webhooks') : null;
    var readOnlyFile = existing ? fileOf(existing.managedBy) : '';
    var sentRows = [];   // request index → URL row, for the server's field paths
    var sentSources = [];

    function findType(t) {
      for (var i = 0; i < types.length; i++) if (types[i].type === t) return types[i];
      return types[0];
    }
    function limits() {
      var t = chosenType || types[0];
      return {
        maxUrls: t.maxUrls || 5,
        maxHeaders: t.maxHeadersPerUrl || 5,
        reserved: (t.reservedHeaders || DEFAULT_TYPE.reservedHeaders).map(function (x) {
          return x.toLowerCase();
        })
      };
    }

    var h1 = view.querySelector('h1');
    var formError = errorBox('form-error');
    var form = h('form', {class: 'setup', novalidate: true, id: 'setup-form'});
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      save();
    });
    if (readOnlyFile) {
      append(view, h('p', {class: 'note read-only-note', text: 'This destination is defined in ' +
        readOnlyFile + '; change it there. It is read-only here, but you can send a test event.'}));
    }
    append(view, formError.el);

    function step(n, title, intro) {
      var headingId = uid('step');
      var section = h('section', {class: 'step card', 'aria-labelledby': headingId,
        dataset: {step: String(n)}},
        h('h2', {id: headingId}, h('span', {class: 'step-number', 'aria-hidden': 'true',
          text: String(n)}), h('span', {class: 'visually-hidden', text: 'Step ' + n + ': '}),
        title),
        intro ? h('p', {class: 'step-intro', text: intro}) : null);
      return section;
    }

    // Step 1: destination type from the catalog.
    var s1 = step(1, 'Choose a destination type', 'Pick the kind of destination from the catalog.');
    var typeErr = groupError();
    var typeFieldset = h('fieldset', {class: 'choices'}, h('legend', {class: 'visually-hidden',
      text: 'Destination type'}));
    types.forEach(function (t) {
      var id = 'type-' + t.type;
      var radio = h('input', {type: 'radio', name: 'destination-type', id: id, value: t.type,
        checked: chosenType && chosenType.type === t.type, disabled: !!existing});
      radio.addEventListener('change', function () {
        chosenType = t;
        revealSteps();
        updateLimits();
      });
      append(typeFieldset, h('div', {class: 'choice'}, radio,
        h('label', {for: id}, h('span', {class: 'choice-name', text: t.name || t.type}),
          t.description ? h('span', {class: 'choice-description', text: t.description}) : null,
          h('span', {class: 'choice-limits', text: 'Up to ' + (t.maxUrls || 5) + ' URLs, ' +
            (t.maxHeadersPerUrl || 5) + ' headers per URL.'}))));
    });
    append(typeFieldset, typeErr.el);
    append(s1, typeFieldset);
    append(form, s1);

    // Step 2: sources.
    var s2 = step(2, 'Choose sources', 'The destination receives the events of the sources you ' +
      'tick. Create a source here if you have none yet.');
    var sourcesErr = groupError();
    var sourceList = h('div', {class: 'checkbox-list', id: 'source-choices'});
    var sourceEmpty = h('p', {class: 'empty', text: 'No sources yet. Create one below.'});
    var sourceFieldset = h('fieldset', {class: 'choices', id: 'sources-fieldset'},
      h('legend', {text: 'Sources'}), sourceEmpty, sourceList, sourcesErr.el);
    var sourceBoxes = {};  // id → checkbox
    var selected = existing ? (existing.sources || []) : [];
    function addSourceChoice(src, checked) {
      var id = 'source-' + src.id;
      var cb = h('input', {type: 'checkbox', id: id, value: src.id, checked: !!checked,
        class: 'source-choice'});
      sourceBoxes[src.id] = cb;
      append(sourceList, h('div', {class: 'choice-inline'}, cb,
        h('label', {for: id}, h('span', {text: src.name || src.id}),
          h('span', {class: 'muted', text: ' ' + src.id + ' · ' + (src.kind || '')}))));
      sourceEmpty.hidden = true;
    }
    sources.forEach(function (src) { addSourceChoice(src, selected.indexOf(src.id) >= 0); });
    // Sources named by the destination but not listed (should not happen) still round-trip.
    selected.forEach(function (id) {
      if (!sourceBoxes[id]) addSourceChoice({id: id, name: id, kind: 'unknown'}, true);
    });
    sourceEmpty.hidden = Object.keys(sourceBoxes).length > 0;
    append(s2, sourceFieldset);

    // Inline "create source" (its own button; Enter in its fields creates the source).
    var newSourceError = errorBox('new-source-error');
    var newName = h('input', {type: 'text', id: 'new-source-name', autocomplete: 'off'});
    var newKind = h('select', {id: 'new-source-kind'}, (catalog.sourceKinds && catalog.sourceKinds
      .length ? catalog.sourceKinds : ['web', 'mobile', 'server']).map(function (k) {
      return h('option', {value: k, text: k});
    }));
    var newNameField = field('Name', newName, null);
    var newKindField = field('Kind', newKind, null);
    var createBtn = h('button', {type: 'button', id: 'create-source', text: 'Create source'});
    var keyPanel = h('div', {class: 'key-panel', id: 'new-key-panel', hidden: true});
    var createPanel = h('div', {class: 'subpanel', role: 'group', 'aria-labelledby': 'create-source-title'},
      h('h3', {id: 'create-source-title', text: 'Create a source'}), newSourceError.el,
      h('div', {class: 'field-row'}, newNameField.wrap, newKindField.wrap,
        h('div', {class: 'field field-button'}, createBtn)), keyPanel);
    append(s2, createPanel);
    newName.addEventListener('keydown', function (ev) {
      if (ev.key === 'Enter') {
        ev.preventDefault();
        createSource();
      }
    });
    createBtn.addEventListener('click', createSource);
    function createSource() {
      newSourceError.hide();
      newNameField.setError('');
      if (!newName.value.trim()) {
        newNameField.setError('Enter a name for the source.', 'client');
        newName.focus();
        return;
      }
      createBtn.disabled = true;
      announce('Creating the source…');
      api('POST', '/sources', {name: newName.value.trim(), kind: newKind.value}).then(function (src) {
        createBtn.disabled = false;
        addSourceChoice(src, true);
        newName.value = '';
        showNewKey(keyPanel, src, (src.writeKeys || [])[0] || '');
        announce('Created source ' + (src.name || src.id) + ' and selected it.', 'ok');
      }, function (e) {
        createBtn.disabled = false;
        if (e.authFailure) return;
        var leftover = [];
        (e.violations || []).forEach(function (v) {
          if (v.field === 'name') {
            newNameField.setError(v.description, 'server');
          } else {
            leftover.push((v.field ? v.field + ': ' : '') + v.description);
          }
        });
        newSourceError.show('The collector refused the source', e.message + codeSuffix(e), leftover);
      });
    }
    append(form, s2);

    // Step 3: URLs with their headers.
    var s3 = step(3, 'Receiver URLs', 'Each event is POSTed as JSON to these URLs. Add static ' +
      'headers (for example an API key) per URL.');
    var urlRowsEl = h('div', {class: 'url-rows', id: 'url-rows'});
    var urlsErr = groupError();
    var addUrlBtn = h('button', {type: 'button', id: 'add-url', text: 'Add URL'});
    var urlLimitNote = h('p', {class: 'limit-note', id: 'url-limit-note', hidden: true});
    addUrlBtn.setAttribute('aria-describedby', urlLimitNote.id);
    append(s3, urlRowsEl, urlsErr.el, h('div', {class: 'actions-inline'}, addUrlBtn, urlLimitNote));
    append(form, s3);
    var rows = [];

    function makeRow(entry) {
      var row = {headers: []};
      row.urlInput = h('input', {type: 'url', class: 'url-input', autocomplete: 'off',
        spellcheck: 'false', placeholder: 'https://example.com/hooks', inputmode: 'url'});
      row.urlInput.value = entry ? entry.url || '' : '';
      row.urlField = field('URL', row.urlInput, null);
      row.legend = h('legend');
      row.err = groupError();
      row.headersEl = h('div', {class: 'header-rows'});
      row.headersErr = groupError();
      row.addHeaderBtn = h('button', {type: 'button', class: 'button-small add-header',
        text: 'Add header'});
      row.headerNote = h('p', {class: 'limit-note', id: uid('note'), hidden: true});
      row.addHeaderBtn.setAttribute('aria-describedby', row.headerNote.id);
      row.removeBtn = h('button', {type: 'button', class: 'button-small button-quiet remove-url',
        text: 'Remove URL'});
      row.el = h('fieldset', {class: 'url-row'}, row.legend, row.urlField.wrap, row.err.el,
        h('div', {class: 'headers-block'}, h('h3', {class: 'sub-heading', text: 'Headers'}),
          row.headersEl, row.headersErr.el,
          h('div', {class: 'actions-inline'}, row.addHeaderBtn, row.headerNote)),
        h('div', {class: 'row-actions'}, row.removeBtn));
      row.urlInput.addEventListener('blur', function () { afterPointer(function () { checkUrl(row); }); });
      row.addHeaderBtn.addEventListener('click', function () {
        if (row.headers.length >= limits().maxHeaders) return;
        var hr = addHeader(row, null);
        renumber();
        hr.nameInput.focus();
      });
      row.removeBtn.addEventListener('click', function () {
        var i = rows.indexOf(row);
        if (i < 0 || rows.length <= 1) return;
        rows.splice(i, 1);
        row.el.remove();
        renumber();
        (rows[Math.min(i, rows.length - 1)].urlInput).focus();
        announce('Removed URL ' + (i + 1) + '.');
      });
      var headers = entry && entry.headers ? entry.headers : {};
      Object.keys(headers).forEach(function (name) {
        addHeader(row, {name: name, value: headers[name]});
      });
      rows.push(row);
      append(urlRowsEl, row.el);
      return row;
    }

    function addHeader(row, entry) {
      var hr = {};
      hr.nameInput = h('input', {type: 'text', class: 'header-name', autocomplete: 'off',
        spellcheck: 'false', placeholder: 'X-Api-Key'});
      hr.valueInput = h('input', {type: 'text', class: 'header-value', autocomplete: 'off',
        spellcheck: 'false'});
      hr.nameInput.value = entry ? entry.name : '';
      hr.valueInput.value = entry ? entry.value : '';
      hr.nameField = field('Header name', hr.nameInput, null);
      hr.valueField = field('Header value', hr.valueInput, null);
      hr.removeBtn = h('button', {type: 'button', class: 'button-small button-quiet remove-header',
        text: 'Remove'});
      // The errors span the whole header row (under name and value), not the name's column.
      hr.el = h('div', {class: 'header-row'}, hr.nameField.wrap, hr.valueField.wrap,
        h('div', {class: 'field field-button'}, hr.removeBtn), hr.nameField.err,
        hr.valueField.err);
      hr.nameInput.addEventListener('blur', function () {
        afterPointer(function () { checkHeaders(row); });
      });
      hr.removeBtn.addEventListener('click', function () {
        var i = row.headers.indexOf(hr);
        row.headers.splice(i, 1);
        hr.el.remove();
        renumber();
        row.addHeaderBtn.focus();
        checkHeaders(row);
      });
      row.headers.push(hr);
      append(row.headersEl, hr.el);
      return hr;
    }

    // Positions, labels for assistive technology, and the limit buttons.
    function renumber() {
      var lim = limits();
      rows.forEach(function (row, i) {
        row.el.dataset.urlIndex = String(i);
        row.legend.textContent = 'URL ' + (i + 1);
        row.urlInput.setAttribute('aria-label', 'URL ' + (i + 1));
        row.removeBtn.hidden = rows.length <= 1;
        row.removeBtn.setAttribute('aria-label', 'Remove URL ' + (i + 1));
        row.headers.forEach(function (hr, j) {
          hr.el.dataset.headerIndex = String(j);
          hr.nameInput.setAttribute('aria-label', 'Header ' + (j + 1) + ' name, URL ' + (i + 1));
          hr.valueInput.setAttribute('aria-label', 'Header ' + (j + 1) + ' value, URL ' + (i + 1));
          hr.removeBtn.setAttribute('aria-label', 'Remove header ' + (j + 1) + ' of URL ' + (i + 1));
        });
        var fullH = row.headers.length >= lim.maxHeaders;
        row.addHeaderBtn.disabled = fullH || !!readOnlyFile;
        row.addHeaderBtn.setAttribute('aria-label', 'Add header to URL ' + (i + 1));
        row.headerNote.hidden = !fullH;
        row.headerNote.textContent = 'at most ' + lim.maxHeaders + ' headers per URL';
      });
      var full = rows.length >= lim.maxUrls;
      addUrlBtn.disabled = full || !!readOnlyFile;
      urlLimitNote.hidden = !full;
      urlLimitNote.textContent = 'at most ' + lim.maxUrls + ' URLs';
    }
    function updateLimits() { renumber(); }

    addUrlBtn.addEventListener('click', function () {
      if (rows.length >= limits().maxUrls) return;
      var row = makeRow(null);
      renumber();
      row.urlInput.focus();
      announce('Added URL ' + rows.length + '.');
    });

    // Client-side checks: hints on blur only; they never block Save (the collector decides).
    function checkUrl(row) {
      if (row.urlField.source() === 'server') return;
      var v = row.urlInput.value.trim();
      var msg = '';
      if (v && !/^https?:\/\//i.test(v)) {
        msg = 'The URL must start with http:// or https://.';
      } else if (v.length > MAX_URL_LENGTH) {
        msg = 'At most ' + MAX_URL_LENGTH.toLocaleString('en') + ' characters.';
      }
      row.urlField.setError(msg, 'client');
    }
    function checkHeaders(row) {
      var lim = limits();
      var seen = {};
      row.headers.forEach(function (hr) {
        if (hr.nameField.source() === 'server') return;
        var name = hr.nameInput.value.trim();
        var msg = '';
        if (!name) {
          if (hr.valueInput.value) msg = 'Enter a header name.';
        } else if (!TOKEN_RE.test(name)) {
          msg = 'A header name is an RFC 7230 token: letters, digits and !#$%&\'*+-.^_`|~ only.';
        } else if (lim.reserved.indexOf(name.toLowerCase()) >= 0) {
          msg = '"' + name + '" is reserved: hookrelay sets it itself.';
        } else if (seen[name.toLowerCase()]) {
          msg = 'Duplicate header name in this URL.';
        }
        if (name) seen[name.toLowerCase()] = true;
        hr.nameField.setError(msg, 'client');
      });
    }

    var initialUrls = existing && existing.urls && existing.urls.length ? existing.urls : [null];
    initialUrls.forEach(function (u) { makeRow(u); });
    renumber();

    // Step 4: shared secret.
    var s4 = step(4, 'Shared secret (optional)', 'With a shared secret every request carries ' +
      'X-Signature: the hex HMAC-SHA1 of the body, so the receiver can check it came from ' +
      'hookrelay.');
    var secret = h('input', {type: 'password', id: 'shared-secret', autocomplete: 'new-password',
      spellcheck: 'false'});
    var toggleSecret = h('button', {type: 'button', id: 'toggle-secret', class: 'button-small',
      'aria-pressed': 'false', 'aria-controls': 'shared-secret', text: 'Show'});
    toggleSecret.addEventListener('click', function () {
      var show = secret.type === 'password';
      secret.type = show ? 'text' : 'password';
      toggleSecret.textContent = show ? 'Hide' : 'Show';
      toggleSecret.setAttribute('aria-pressed', show ? 'true' : 'false');
    });
    var secretField = field('Shared secret', secret, null, toggleSecret);
    var removeSecret = h('input', {type: 'checkbox', id: 'remove-secret'});
    var removeSecretWrap = h('div', {class: 'choice-inline', hidden: true}, removeSecret,
      h('label', {for: 'remove-secret', text: 'Remove the shared secret (requests are no longer ' +
        'signed)'}));
    removeSecret.addEventListener('change', function () {
      secret.disabled = removeSecret.checked;
    });
    append(s4, secretField.wrap, removeSecretWrap);
    append(form, s4);

    // Step 5: id and enable, then save.
    var s5 = step(5, 'Name and enable', 'Events flow as soon as an enabled destination is saved.');
    var idInput = h('input', {type: 'text', id: 'destination-id', autocomplete: 'off',
      spellcheck: 'false', placeholder: 'orders-hook'});
    var idField = field('Destination id', idInput, '1 to 64 characters: letters, digits, _ and -. ' +
      'Leave it empty to get a generated id.');
    idInput.addEventListener('blur', function () {
      afterPointer(function () {
        if (idField.source() === 'server' || idInput.readOnly) return;
        var v = idInput.value.trim();
        idField.setError(v && !ID_RE.test(v) ? 'Use 1 to 64 characters: letters, digits, _ and -.' :
          '', 'client');
      });
    });
    var enabled = switchInput('destination-enabled', 'Enabled', existing ? !!existing.enabled : false);
    var enabledErr = h('p', {class: 'field-error', id: 'destination-enabled-error', hidden: true});
    enabled.input.setAttribute('aria-describedby', 'destination-enabled-hint ' + enabledErr.id);
    var saveBtn = h('button', {type: 'submit', class: 'button-primary', id: 'save-destination',
      text: 'Save destination'});
    // Protection (optional): the destination's rate limit and circuit breaker. The other
    // delivery options (timeout, retry window, backoff) are kept as they are.
    var rateIn = h('input', {type: 'number', id: 'rate-limit', min: '1', max: '100000', step: '1',
      inputmode: 'numeric', placeholder: 'no limit'});
    var rateField = field('Rate limit (attempts per second)', rateIn, 'Empty: no limit. 1 to ' +
      '100,000; jobs beyond it wait in the store, no attempt is spent.');
    var breakerIn = h('input', {type: 'number', id: 'breaker-failures', min: '1', max: '1000',
      step: '1', inputmode: 'numeric', placeholder: 'no breaker'});
    var breakerField = field('Circuit breaker: pause after this many failures in a row',
      breakerIn, 'Empty: no breaker. 1 to 1,000; attempts then pause (5 s, doubling up to ' +
      '5 min) instead of each job spending its own retries.');
    var protection = h('details', {class: 'protection', id: 'protection-options'},
      h('summary', {text: 'Protection (optional): rate limit and circuit breaker'}),
      rateField.wrap, breakerField.wrap);
    append(s5, idField.wrap, h('div', {class: 'field'}, enabled.label,
      h('p', {class: 'field-hint', id: 'destination-enabled-hint', text: 'A disabled destination ' +
        'receives nothing; events are not queued for it.'}), enabledErr),
      protection, h('div', {class: 'actions'}, saveBtn));
    append(form, s5);

    // Step 6: test.
    var s6 = step(6, 'Send a test event', 'A sample track event goes through the normal ' +
      'pipeline to this destination only (even when disabled), and you see each receiver\'s answer.');
    var testBtn = h('button', {type: 'button', id: 'send-test', text: 'Send test event'});
    var testNote = h('p', {class: 'field-hint', id: 'send-test-note',
      text: 'Save the destination first.'});
    testBtn.setAttribute('aria-describedby', testNote.id);
    var testOut = h('div', {class: 'test-output', id: 'test-output'});
    var testError = errorBox('test-error');
    append(s6, h('div', {class: 'actions-inline'}, testBtn, testNote), testError.el, testOut);
    testBtn.addEventListener('click', function () {
      if (!editing) return;
      testError.hide();
      runTest(editing.id, testBtn, testOut, testError);
    });
    append(form, s6);

    append(view, form);

    // Advanced: the request as JSON (any body the API accepts, e.g. to see its limits).
    var jsonBody = h('textarea', {id: 'json-body', rows: '12', spellcheck: 'false',
      class: 'code-input'});
    var jsonField = field('Request body (JSON)', jsonBody, 'Sent as is: POST ' + API +
      '/destinations for a new destination, PATCH ' + API + '/destinations/{id} once saved.');
    var jsonError = errorBox('json-error');
    var jsonFill = h('button', {type: 'button', id: 'json-fill', text: 'Fill from the form'});
    var jsonSend = h('button', {type: 'button', id: 'json-send', text: 'Send JSON'});
    var jsonDetails = h('details', {class: 'advanced card', id: 'json-editor'},
      h('summary', {text: 'Advanced: edit the request as JSON'}), jsonError.el, jsonField.wrap,
      h('div', {class: 'actions-inline'}, jsonFill, jsonSend));
    append(view, jsonDetails);
    jsonDetails.addEventListener('toggle', function () {
      if (jsonDetails.open && !jsonBody.value) fillJson();
    });
    jsonFill.addEventListener('click', fillJson);
    function fillJson() {
      jsonBody.value = JSON.stringify(buildBody().body, null, 2);
    }
    jsonSend.addEventListener('click', function () {
      jsonError.hide();
      var body;
      try {
        body = JSON.parse(jsonBody.value);
      } catch (e) {
        jsonError.show('This is not valid JSON', e.message);
        return;
      }
      jsonSend.disabled = true;
      announce('Sending the JSON request…');
      var call = editing ? api('PATCH', '/destinations/' + enc(editing.id), body) :
        api('POST', '/destinations', body);
      call.then(function (saved) {
        jsonSend.disabled = false;
        announce('Saved destination ' + saved.id + '.', 'ok', true);
        if (location.hash === '#/setup/' + enc(saved.id)) {
          route();
        } else {
          location.hash = '#/setup/' + enc(saved.id);
        }
      }, function (e) {
        jsonSend.disabled = false;
        if (e.authFailure) return;
        announce('The collector refused the request.', 'error');
        showApiError(jsonError, e, 'The collector refused the request');
        jsonError.el.focus();
      });
    });

    // Read-only (file-defined) destinations: every input of the form is disabled.
    if (readOnlyFile) {
      Array.prototype.forEach.call(form.querySelectorAll('input, select, button'), function (el) {
        if (el !== testBtn) el.disabled = true;
      });
      jsonSend.disabled = true;
    }

    function revealSteps() {
      var show = !!chosenType;
      [s2, s3, s4, s5, s6].forEach(function (s) { s.hidden = !show; });
    }

    function enterEditMode(dest) {
      editing = dest;
      h1.textContent = 'Edit destination ' + dest.id;
      document.title = 'Edit destination ' + dest.id + ' · hookrelay console';
      idInput.value = dest.id;
      idInput.readOnly = true;
      idField.wrap.querySelector('.field-hint').textContent = 'The id cannot be changed.';
      Array.prototype.forEach.call(typeFieldset.querySelectorAll('input'), function (r) {
        r.disabled = true;
      });
      secret.value = '';
      secret.disabled = false;
      removeSecret.checked = false;
      secret.placeholder = dest.sharedSecretSet ? 'unchanged' : 'none';
      removeSecretWrap.hidden = !dest.sharedSecretSet || !!readOnlyFile;
      var o = dest.options || {};
      rateIn.value = o.rateLimitPerSecond ? String(o.rateLimitPerSecond) : '';
      breakerIn.value = o.circuitBreaker && o.circuitBreaker.failures ?
        String(o.circuitBreaker.failures) : '';
      protection.open = !!(rateIn.value || breakerIn.value);
      testBtn.disabled = false;
      testNote.textContent = dest.enabled ? 'The destination is enabled.' :
        'The destination is disabled; the test event is sent anyway.';
      jsonBody.value = '';
      if (jsonDetails.open) fillJson();
    }

    // The request body: POST (everything) or PATCH (the fields this form edits).
    function buildBody() {
      var body = {};
      sentRows = [];
      sentSources = [];
      if (!editing) {
        var id = idInput.value.trim();
        if (id) body.id = id;
        body.type = (chosenType || types[0]).type;
      }
      Object.keys(sourceBoxes).forEach(function (id) {
        if (sourceBoxes[id].checked) sentSources.push(id);
      });
      body.sources = sentSources.slice();
      body.enabled = enabled.input.checked;
      body.urls = [];
      rows.forEach(function (row) {
        var entry = {url: row.urlInput.value.trim()};
        var headers = {};
        var sent = [];
        row.headers.forEach(function (hr) {
          var name = hr.nameInput.value.trim();
          if (!name && !hr.valueInput.value) return;  // an empty header row is ignored
          headers[name] = hr.valueInput.value;
          sent.push({name: name, hr: hr});
        });
        if (sent.length) entry.headers = headers;
        body.urls.push(entry);
        sentRows.push({row: row, headers: sent});
      });
      if (secret.value && !removeSecret.checked) {
        body.sharedSecret = secret.value;
      } else if (editing && removeSecret.checked) {
        body.sharedSecret = '';
      }
      // Options are replaced as a whole: start from the stored ones and change only these two.
      var had = (editing && editing.options) || {};
      var opts = JSON.parse(JSON.stringify(had));
      var rate = rateIn.value.trim();
      var failures = breakerIn.value.trim();
      if (rate) opts.rateLimitPerSecond = Number(rate); else delete opts.rateLimitPerSecond;
      if (failures) {
        opts.circuitBreaker = Object.assign({}, opts.circuitBreaker || {},
          {failures: Number(failures)});
      } else {
        delete opts.circuitBreaker;
      }
      if (JSON.stringify(opts) !== JSON.stringify(had)) body.options = opts;
      return {body: body};
    }

    function clearServerErrors() {
      formError.hide();
      typeErr.set('');
      sourcesErr.set('');
      urlsErr.set('');
      idField.setError('');
      secretField.setError('');
      setError(enabled.input, enabledErr, '');
      rateField.setError('');
      breakerField.setError('');
      rows.forEach(function (row) {
        row.urlField.setError('');
        row.err.set('');
        row.headersErr.set('');
        row.headers.forEach(function (hr) {
          hr.nameField.setError('');
          hr.valueField.setError('');
        });
      });
    }

    // Puts one field violation next to the field it names; false when no field matches.
    function place(v) {
      var f = v.field || '';
      var d = v.description || '';
      var m;
      if (f === 'type') { typeErr.set(d, 'server'); return true; }
      if (f === 'id') { idField.setError(d, 'server'); return true; }
      if (f === 'sharedSecret') { secretField.setError(d, 'server'); return true; }
      if (f === 'enabled') { setError(enabled.input, enabledErr, d, 'server'); return true; }
      if (f.indexOf('options.rateLimitPerSecond') === 0) {
        protection.open = true;
        rateField.setError(d, 'server');
        return true;
      }
      if (f.indexOf('options.circuitBreaker') === 0) {
        protection.open = true;
        breakerField.setError(d, 'server');
        return true;
      }
      if (f === 'sources') { sourcesErr.set(d, 'server'); return true; }
      if ((m = /^sources\[(\d+)\]/.exec(f))) {
        var sid = sentSources[Number(m[1])];
        sourcesErr.set((sid ? '"' + sid + '": ' : '') + d, 'server');
        return true;
      }
      if (f === 'urls') { urlsErr.set(d, 'server'); return true; }
      if ((m = /^urls\[(\d+)\](.*)$/.exec(f))) {
        var sent = sentRows[Number(m[1])];
        if (!sent) return false;
        var rest = m[2];
        if (rest === '.url') { sent.row.urlField.setError(d, 'server'); return true; }
        var hm = /^\.headers\[(.*)\]$/.exec(rest);
        if (hm) {
          var name = headerKey(hm[1]);
          var match = null;
          sent.headers.forEach(function (x) { if (!match && x.name === name) match = x; });
          sent.headers.forEach(function (x) {
            if (!match && x.name.toLowerCase() === name.toLowerCase()) match = x;
          });
          if (match) { match.hr.nameField.setError(d, 'server'); return true; }
          sent.row.headersErr.set('"' + name + '": ' + d, 'server');
          return true;
        }
        if (rest === '.headers') { sent.row.headersErr.set(d, 'server'); return true; }
        sent.row.err.set(d, 'server');
        return true;
      }
      return false;
    }

    function headerKey(raw) {
      if (raw.charAt(0) === '"') {
        try { return String(JSON.parse(raw)); } catch (ignored) { return raw.slice(1, -1); }
      }
      if (raw.charAt(0) === '\'') return raw.slice(1, -1);
      return raw;
    }

    function save() {
      if (readOnlyFile) return;
      clearServerErrors();
      if (!chosenType) {
        typeErr.set('Choose a destination type.', 'client');
        return;
      }
      var built = buildBody();
      // The one check that must block: a JSON object cannot carry the same header name twice.
      var dup = false;
      sentRows.forEach(function (s) {
        var names = {};
        s.headers.forEach(function (x) {
          if (names[x.name]) {
            x.hr.nameField.setError('This URL already has a header named "' + x.name + '".',
              'client');
            dup = true;
          }
          names[x.name] = true;
        });
      });
      if (dup) {
        formError.show('Check the headers', 'A URL lists the same header name twice.');
        formError.el.focus();
        return;
      }
      saveBtn.disabled = true;
      announce('Saving the destination…');
      var call = editing ? api('PATCH', '/destinations/' + enc(editing.id), built.body) :
        api('POST', '/destinations', built.body);
      call.then(function (saved) {
        saveBtn.disabled = false;
        var created = !editing;
        enterEditMode(saved);
        if (created) history.replaceState(null, '', '#/setup/' + enc(saved.id));
        announce((created ? 'Created' : 'Saved') + ' destination ' + saved.id + ' (' +
          (saved.enabled ? 'enabled' : 'disabled') + '). Send a test event below.', 'ok');
      }, function (e) {
        saveBtn.disabled = false;
        if (e.authFailure) return;
        var unmatched = [];
        (e.violations || []).forEach(function (v) {
          if (!place(v)) unmatched.push((v.field ? v.field + ': ' : '') + (v.description || ''));
        });
        var placed = e.violations.length - unmatched.length;
        var marked = placed ? (placed === 1 ? 'One field is' : placed + ' fields are') +
          ' marked below.' : '';
        formError.show('The collector refused the destination',
          unmatched.length || !placed ? e.message + codeSuffix(e) + (marked ? ' ' + marked : '') :
            marked + ' Correct ' + (placed === 1 ? 'it' : 'them') + ' and save again.',
          unmatched);
        announce('The collector refused the destination.', 'error');
        formError.el.focus();
      });
    }

    revealSteps();
    if (editing) {
      enterEditMode(editing);
    } else {
      testBtn.disabled = true;
    }
    if (readOnlyFile) testBtn.disabled = false;
  }

  // Shows a new write key with a Copy button.
  function showNewKey(panel, src, key) {
    clear(panel);
    var input = h('input', {type: 'text', id: 'new-write-key', class: 'key-input code',
      readOnly: true, value: key, spellcheck: 'false'});
    append(panel, h('p', {class: 'key-title', text: 'Write key of ' + (src.name || src.id) +
      ' (' + src.id + '): use it in your SDKs as the write key.'}),
      h('div', {class: 'field'}, h('label', {for: input.id, text: 'Write key'}),
        h('div', {class: 'input-row'}, input, copyButton(function () { return input.value; }))));
    panel.hidden = false;
    input.addEventListener('focus', function () { input.select(); });
  }

  // POST :test and its result table.
  function runTest(id, button, out, errBox) {
    button.disabled = true;
    clear(out);
    append(out, loading('Sending a test event to ' + id + '… (up to 10 s)'));
    announce('Sending a test event to ' + id + '…');
    api('POST', '/destinations/' + enc(id) + ':test', {}).then(function (r) {
      button.disabled = false;
      clear(out);
      renderTestResult(out, id, r);
      announce('Test event to ' + id + ': ' + (r.outcome || 'no outcome') + '.',
        r.outcome === 'delivered' ? 'ok' : 'error');
    }, function (e) {
      button.disabled = false;
      clear(out);
      if (e.authFailure) return;
      showApiError(errBox, e, e.status === 504 ? 'No deliverer answered within 10 s' :
        'The test event could not be sent');
      announce('The test event to ' + id + ' failed.', 'error');
    });
  }

  function renderTestResult(out, id, r) {
    var outcome = r.outcome || 'unknown';
    var cls = outcome === 'delivered' ? 'badge-ok' : outcome === 'retry' ? 'badge-warn' : 'badge-bad';
    var rows = (r.results || []).map(function (x) {
      var status = x.status || 0;
      return h('tr', null,
        h('td', {class: 'cell-url', text: x.url || ''}),
        h('td', {class: 'cell-status'}, h('span', {class: 'badge ' + (status >= 200 && status < 300 ?
          'badge-ok' : status ? 'badge-bad' : 'badge-warn'), text: status ? String(status) :
          'no response'})),
        h('td', {class: 'cell-latency', text: num(x.latencyMs) + ' ms'}),
        h('td', {class: 'cell-error', text: x.error || '—'}));
    });
    append(out, h('p', {class: 'test-outcome', id: 'test-outcome'}, 'Outcome: ',
      h('span', {class: 'badge ' + cls, text: outcome}),
      r.messageId ? h('span', {class: 'muted', text: '  messageId ' + r.messageId}) : null),
      table('Answers of the receivers to the test event of ' + id,
        ['URL', 'Status', 'Latency', 'Error'], rows, {id: 'test-results'}));
  }

  // ---------------------------------------------------------------------------------------------
  // Sources

  function viewSources(view) {
    append(view, pageHeading('Sources'));
    append(view, h('p', {class: 'lead', text: 'A source sends events with one of its write keys. ' +
      'Rotate a key by creating a new one, updating your SDKs, then revoking the old one.'}));
    var box = errorBox('sources-error');
    append(view, box.el);
    var rotatePanel = h('section', {class: 'card key-panel', id: 'rotate-panel', hidden: true,
      'aria-labelledby': 'rotate-title'});
    append(view, rotatePanel);
    var listWrap = h('div', {id: 'sources-list'});
    append(view, listWrap);

    // Create form.
    var createError = errorBox('create-source-error');
    var idIn = h('input', {type: 'text', id: 'source-id', autocomplete: 'off', spellcheck: 'false'});
    var nameIn = h('input', {type: 'text', id: 'source-name', autocomplete: 'off'});
    var kindIn = h('select', {id: 'source-kind'});
    var idF = field('Id (optional)', idIn, 'Generated when empty.');
    var nameF = field('Name', nameIn, null);
    var kindF = field('Kind', kindIn, null);
    var createBtn = h('button', {type: 'submit', class: 'button-primary', id: 'create-source',
      text: 'Create source'});
    var keyPanel = h('div', {class: 'key-panel', id: 'new-key-panel', hidden: true});
    var createForm = h('form', {class: 'card', novalidate: true, 'aria-labelledby': 'create-title'},
      h('h2', {id: 'create-title', text: 'Create a source'}), createError.el,
      h('div', {class: 'field-row'}, idF.wrap, nameF.wrap, kindF.wrap,
        h('div', {class: 'field field-button'}, createBtn)), keyPanel);
    append(view, createForm);
    loadCatalog().then(function (c) {
      (c.sourceKinds && c.sourceKinds.length ? c.sourceKinds : ['web', 'mobile', 'server'])
        .forEach(function (k) { append(kindIn, h('option', {value: k, text: k})); });
    }, function () {
      ['web', 'mobile', 'server'].forEach(function (k) {
        append(kindIn, h('option', {value: k, text: k}));
      });
    });
    createForm.addEventListener('submit', function (ev) {
      ev.preventDefault();
      createError.hide();
      [idF, nameF].forEach(function (f) { f.setError(''); });
      var body = {name: nameIn.value.trim(), kind: kindIn.value};
      if (idIn.value.trim()) body.id = idIn.value.trim();
      createBtn.disabled = true;
      api('POST', '/sources', body).then(function (src) {
        createBtn.disabled = false;
        idIn.value = '';
        nameIn.value = '';
        showNewKey(keyPanel, src, (src.writeKeys || [])[0] || '');
        announce('Created source ' + src.id + '.', 'ok');
        load();
      }, function (e) {
        createBtn.disabled = false;
        if (e.authFailure) return;
        var left = [];
        e.violations.forEach(function (v) {
          if (v.field === 'id') { idF.setError(v.description, 'server'); } else if (v.field === 'name') {
            nameF.setError(v.description, 'server');
          } else { left.push((v.field ? v.field + ': ' : '') + v.description); }
        });
        createError.show('The collector refused the source', e.message + codeSuffix(e), left);
      });
    });

    function load() {
      clear(listWrap);
      append(listWrap, loading());
      listAll('/sources', 'sources').then(function (sources) {
        clear(listWrap);
        if (!sources.length) {
          append(listWrap, h('p', {class: 'empty', id: 'sources-empty',
            text: 'No sources yet. Create one below.'}));
          return;
        }
        var rows = sources.map(sourceRow);
        append(listWrap, table('Sources', ['Id', 'Name', 'Kind', 'Write keys', 'Actions'], rows,
          {id: 'sources-table', captionHidden: true}));
      }, function (e) {
        clear(listWrap);
        showApiError(box, e, 'Could not list the sources');
      });
    }

    function sourceRow(src) {
      var file = fileOf(src.managedBy);
      var keys = src.writeKeys || [];
      var keyList = h('ul', {class: 'key-list'}, keys.map(function (key) {
        var code = h('code', {class: 'key', text: maskKey(key)});
        var revealed = false;
        var reveal = h('button', {type: 'button', class: 'button-small reveal-key',
          'aria-pressed': 'false', text: 'Reveal'});
        reveal.addEventListener('click', function () {
          revealed = !revealed;
          code.textContent = revealed ? key : maskKey(key);
          reveal.textContent = revealed ? 'Hide' : 'Reveal';
          reveal.setAttribute('aria-pressed', revealed ? 'true' : 'false');
        });
        var revoke = null;
        if (!file && keys.length > 1) {
          revoke = h('button', {type: 'button', class: 'button-small button-danger revoke-key',
            text: 'Revoke', 'aria-label': 'Revoke write key ' + maskKey(key) + ' of ' + src.id});
          revoke.addEventListener('click', function () { revokeKey(src, key); });
        }
        return h('li', {dataset: {keySuffix: key.slice(-4)}}, code, ' ', reveal, ' ',
          copyButton(function () { return key; }), revoke ? ' ' : null, revoke);
      }));
      var actions = h('div', {class: 'row-buttons'});
      if (file) {
        append(actions, h('p', {class: 'note', text: 'defined in ' + file}));
      } else {
        var rotate = h('button', {type: 'button', class: 'button-small rotate-key',
          text: 'Rotate key', 'aria-label': 'Rotate the write key of ' + src.id});
        rotate.addEventListener('click', function () { rotateKey(src, rotate); });
        var del = h('button', {type: 'button', class: 'button-small button-danger delete-source',
          text: 'Delete', 'aria-label': 'Delete source ' + src.id});
        del.addEventListener('click', function () { deleteSource(src); });
        append(actions, rotate, ' ', del);
      }
      return h('tr', {dataset: {sourceId: src.id}, class: file ? 'read-only' : null},
        h('td', null, h('code', {text: src.id})), h('td', {text: src.name || ''}),
        h('td', {text: src.kind || ''}), h('td', null, keyList), h('td', null, actions));
    }

    function rotateKey(src, button) {
      button.disabled = true;
      var oldKeys = (src.writeKeys || []).slice();
      api('POST', '/sources/' + enc(src.id) + '/write-keys', {}).then(function (r) {
        button.disabled = false;
        showRotated(r.source || src, r.writeKey || '', oldKeys);
        announce('Created a new write key for ' + src.id + '. Update your SDKs, then revoke ' +
          'the old key.', 'ok');
        load();
      }, function (e) {
        button.disabled = false;
        showApiError(box, e, 'Could not create a write key');
      });
    }

    function showRotated(src, newKey, oldKeys) {
      clear(rotatePanel);
      var input = h('input', {type: 'text', id: 'rotated-write-key', class: 'key-input code',
        readOnly: true, value: newKey, spellcheck: 'false'});
      input.addEventListener('focus', function () { input.select(); });
      append(rotatePanel, h('h2', {id: 'rotate-title', text: 'New write key for ' + src.id}),
        h('div', {class: 'field'}, h('label', {for: input.id, text: 'New write key'}),
          h('div', {class: 'input-row'}, input, copyButton(function () { return newKey; }))),
        h('p', {text: 'Once your SDKs use the new key, revoke the old one. Ingest refuses a ' +
          'revoked key from the next request on.'}));
      var list = h('ul', {class: 'key-list'});
      oldKeys.forEach(function (key) {
        var btn = h('button', {type: 'button', class: 'button-danger revoke-old-key',
          text: 'Revoke old key ' + maskKey(key)});
        btn.addEventListener('click', function () {
          revokeKey(src, key, function () { btn.disabled = true; btn.textContent = 'Revoked ' + maskKey(key); });
        });
        append(list, h('li', null, btn));
      });
      append(rotatePanel, list);
      var close = h('button', {type: 'button', class: 'button-quiet', text: 'Done'});
      close.addEventListener('click', function () { rotatePanel.hidden = true; });
      append(rotatePanel, h('div', {class: 'actions-inline'}, close));
      rotatePanel.hidden = false;
      input.focus();
    }

    function revokeKey(src, key, after) {
      if (!window.confirm('Revoke write key ' + maskKey(key) + ' of source "' + src.id + '"?\n' +
          'Ingest refuses it from the next request on.')) return;
      api('DELETE', '/sources/' + enc(src.id) + '/write-keys/' + enc(key)).then(function () {
        announce('Revoked write key ' + maskKey(key) + ' of ' + src.id + '.', 'ok');
        if (after) after();
        load();
      }, function (e) {
        showApiError(box, e, 'Could not revoke the write key');
        announce('Could not revoke the write key.', 'error');
      });
    }

    function deleteSource(src) {
      if (!window.confirm('Delete source "' + src.id + '" and all its write keys?')) return;
      api('DELETE', '/sources/' + enc(src.id)).then(function () {
        announce('Deleted source ' + src.id + '.', 'ok');
        load();
      }, function (e) {
        showApiError(box, e, 'Could not delete source ' + src.id);
        announce('Could not delete source ' + src.id + '.', 'error');
      });
    }

    load();
  }

  // ---------------------------------------------------------------------------------------------
  // Destinations

  function viewDestinations(view) {
    append(view, h('div', {class: 'title-row'}, pageHeading('Destinations'),
      h('a', {href: '#/setup', class: 'button button-primary', id: 'new-destination',
        text: 'New destination'})));
    var box = errorBox('destinations-error');
    append(view, box.el);
    var listWrap = h('div', {id: 'destinations-list'});
    append(view, listWrap);
    var testSection = h('section', {class: 'card', id: 'list-test', hidden: true,
      'aria-labelledby': 'list-test-title'});
    append(view, testSection);

    function load() {
      clear(listWrap);
      append(listWrap, loading());
      listAll('/destinations', 'destinations').then(function (dests) {
        clear(listWrap);
        if (!dests.length) {
          append(listWrap, h('p', {class: 'empty', id: 'destinations-empty'},
            'No destinations yet. ', h('a', {href: '#/setup', text: 'Set one up'}), '.'));
          return;
        }
        append(listWrap, table('Destinations', ['Id', 'Enabled', 'Sources', 'URLs', 'Delivered',
          'Retried', 'Dead', 'Failed', 'Last error', 'Protection', 'Actions'], dests.map(destRow),
        {id: 'destinations-table', captionHidden: true, cls: 'dest-table'}));
      }, function (e) {
        clear(listWrap);
        showApiError(box, e, 'Could not list the destinations');
      });
    }

    function destRow(d) {
      var file = fileOf(d.managedBy);
      var st = d.stats || {};
      var delivered = num(st.delivered), retried = num(st.retried), dead = num(st.dead);
      var total = delivered + retried + dead;
      var rate = total ? (retried + dead) / total : null;
      var sw = switchInput(null, d.enabled ? 'On' : 'Off', !!d.enabled, '(enabled: ' + d.id + ')');
      sw.input.classList.add('enabled-toggle');
      sw.input.disabled = !!file;
      sw.input.addEventListener('change', function () {
        var want = sw.input.checked;
        sw.input.disabled = true;
        api('PATCH', '/destinations/' + enc(d.id), {enabled: want}).then(function (saved) {
          sw.input.disabled = false;
          sw.input.checked = !!saved.enabled;
          sw.label.querySelector('.switch-text').textContent = saved.enabled ? 'On' : 'Off';
          announce((saved.enabled ? 'Enabled ' : 'Disabled ') + d.id + '.', 'ok');
        }, function (e) {
          sw.input.disabled = false;
          sw.input.checked = !want;
          showApiError(box, e, 'Could not change ' + d.id);
          announce('Could not change ' + d.id + '.', 'error');
        });
      });
      var actions = h('div', {class: 'row-buttons'});
      var edit = h('a', {href: '#/setup/' + enc(d.id), class: 'button button-small edit-destination',
        text: file ? 'View' : 'Edit', 'aria-label': (file ? 'View ' : 'Edit ') + d.id});
      var test = h('button', {type: 'button', class: 'button-small test-destination', text: 'Test',
        'aria-label': 'Send a test event to ' + d.id});
      test.addEventListener('click', function () {
        clear(testSection);
        var out = h('div', {class: 'test-output'});
        var err = errorBox();
        append(testSection, h('h2', {id: 'list-test-title', text: 'Test event to ' + d.id}),
          err.el, out);
        testSection.hidden = false;
        runTest(d.id, test, out, err);
      });
      append(actions, edit, test);
      var actionsNote = null;
      if (!file) {
        var del = h('button', {type: 'button', class: 'button-small button-danger delete-destination',
          text: 'Delete', 'aria-label': 'Delete ' + d.id});
        del.addEventListener('click', function () {
          if (!window.confirm('Delete destination "' + d.id + '"? Events stop flowing to it.')) return;
          api('DELETE', '/destinations/' + enc(d.id)).then(function () {
            announce('Deleted destination ' + d.id + '.', 'ok');
            load();
          }, function (e) {
            showApiError(box, e, 'Could not delete ' + d.id);
          });
        });
        append(actions, del);
      } else {
        actionsNote = h('p', {class: 'note', text: 'defined in ' + file});
      }
      return h('tr', {dataset: {destinationId: d.id}, class: file ? 'read-only' : null},
        h('td', null, h('code', {text: d.id}),
          d.sharedSecretSet ? h('span', {class: 'tag', text: 'signed'}) : null),
        h('td', null, sw.label),
        h('td', {text: (d.sources || []).join(', ')}),
        h('td', {class: 'num', text: String((d.urls || []).length)}),
        h('td', {class: 'num', text: delivered.toLocaleString()}),
        h('td', {class: 'num', text: retried.toLocaleString()}),
        h('td', {class: 'num', text: dead.toLocaleString()}),
        h('td', {class: 'num' + (rate !== null && rate > 0.05 ? ' bad' : ''),
          text: rate === null ? '—' : (rate * 100).toFixed(1) + ' %'}),
        h('td', {class: 'cell-error'}, st.lastError ? [h('span', {text: st.lastError}), h('br'),
          h('small', {class: 'muted'}, timeEl(st.lastErrorAt))] : h('span', {class: 'muted',
          text: '—'})),
        protectionCell(d),
        h('td', null, actions, actionsNote));
    }

    // The destination's protection on this collector: breaker state, adaptive limit and jobs in
    // flight (stats), and the options that bound it (rate limit, breaker settings).
    function protectionCell(d) {
      var st = d.stats || {};
      var opts = d.options || {};
      var circuit = st.circuit || 'closed';
      var badge = circuit === 'open' ? 'badge-bad' : circuit === 'half_open' ? 'badge-warn' :
        'badge-ok';
      var lines = [h('span', {class: 'badge circuit ' + badge,
        text: circuit === 'half_open' ? 'half-open' : circuit,
        title: 'Circuit breaker: ' + (circuit === 'open' ? 'attempts paused' :
          circuit === 'half_open' ? 'one probe attempt out' : 'attempts flow')})];
      if (st.concurrencyLimit !== undefined) {
        lines.push(h('br'), h('small', {class: 'muted concurrency',
          title: 'Jobs in flight now / the adaptive concurrency limit on this collector',
          text: num(st.inFlight).toLocaleString() + ' in flight / limit ' +
            num(st.concurrencyLimit).toLocaleString()}));
      }
      if (opts.rateLimitPerSecond) {
        lines.push(h('br'), h('small', {class: 'bounds', text: '≤ ' + num(opts.rateLimitPerSecond) +
          '/s', title: 'rate_limit_per_second'}));
      }
      if (opts.circuitBreaker && opts.circuitBreaker.failures) {
        lines.push(h('br'), h('small', {class: 'bounds', text: 'breaker after ' +
          num(opts.circuitBreaker.failures) + ' failures'}));
      }
      return h('td', {class: 'cell-protection'}, lines);
    }

    load();
  }

  // ---------------------------------------------------------------------------------------------
  // Dead letters

  function viewDeadLetters(view) {
    append(view, pageHeading('Dead letters'));
    append(view, h('p', {class: 'lead', text: 'Jobs that failed for good: every URL answered a ' +
      '4xx, or retries ran out. Inspect one, then replay them once the receiver is fixed.'}));
    var box = errorBox('dead-letters-error');
    append(view, box.el);

    var destSel = h('select', {id: 'dl-destination'}, h('option', {value: '', text: 'All destinations'}));
    var fromIn = h('input', {type: 'datetime-local', id: 'dl-from', step: '1'});
    var toIn = h('input', {type: 'datetime-local', id: 'dl-to', step: '1'});
    var apply = h('button', {type: 'submit', class: 'button-primary', id: 'dl-apply',
      text: 'Apply filter'});
    var replay = h('button', {type: 'button', class: 'button-danger', id: 'dl-replay',
      text: 'Replay matching…'});
    var filterForm = h('form', {class: 'card filter', id: 'dead-letters-filter', novalidate: true,
      'aria-label': 'Filter dead letters'},
      h('div', {class: 'field-row'}, field('Destination', destSel, null).wrap,
        field('Died from (local time)', fromIn, null).wrap,
        field('Died before (local time)', toIn, null).wrap,
        h('div', {class: 'field field-button'}, apply), h('div', {class: 'field field-button'},
          replay)));
    append(view, filterForm);
    var summary = h('p', {class: 'summary', id: 'dl-summary'});
    var listWrap = h('div', {id: 'dead-letters-list'});
    var more = h('button', {type: 'button', id: 'dl-more', text: 'Load more', hidden: true});
    var detail = h('section', {class: 'card', id: 'job-detail', hidden: true,
      'aria-labelledby': 'job-title'});
    append(view, summary, listWrap, h('div', {class: 'actions-inline'}, more), detail);

    listAll('/destinations', 'destinations').then(function (dests) {
      dests.forEach(function (d) { append(destSel, h('option', {value: d.id, text: d.id})); });
    }, function (e) { showApiError(box, e, 'Could not list the destinations'); });

    var jobs = [];
    var nextToken = '';
    var tbody = null;

    function filter() {
      var f = {};
      if (destSel.value) f.destinationId = destSel.value;
      if (fromIn.value) f.from = new Date(fromIn.value).toISOString();
      if (toIn.value) f.to = new Date(toIn.value).toISOString();
      return f;
    }

    function query(f, token) {
      var q = ['page_size=100'];
      if (f.destinationId) q.push('destination_id=' + enc(f.destinationId));
      if (f.from) q.push('from=' + enc(f.from));
      if (f.to) q.push('to=' + enc(f.to));
      if (token) q.push('page_token=' + enc(token));
      return '?' + q.join('&');
    }

    function load(append_) {
      box.hide();
      var f = filter();
      if (!append_) {
        jobs = [];
        tbody = null;
        clear(listWrap);
        append(listWrap, loading());
        detail.hidden = true;
      }
      more.disabled = true;
      api('GET', '/dead-letters' + query(f, append_ ? nextToken : '')).then(function (r) {
        more.disabled = false;
        var page = r.jobs || [];
        jobs = jobs.concat(page);
        nextToken = r.nextPageToken || '';
        more.hidden = !nextToken;
        if (!append_) clear(listWrap);
        summary.textContent = jobs.length ? jobs.length + (nextToken ? '+' : '') +
          ' dead letter' + (jobs.length === 1 ? '' : 's') + (f.destinationId ? ' of ' +
          f.destinationId : '') + '.' : '';
        if (!jobs.length) {
          append(listWrap, h('p', {class: 'empty', id: 'dead-letters-empty',
            text: 'No dead letters' + (Object.keys(f).length ? ' match this filter.' :
              '. Every job was delivered or is still being retried.')}));
          return;
        }
        if (!tbody) {
          tbody = h('tbody');
          var t = h('table', {class: 'data-table clickable', id: 'dead-letters-table'},
            h('caption', {class: 'visually-hidden', text: 'Dead letters; choose one to inspect it'}),
            h('thead', null, h('tr', null, ['Job', 'Destination', 'Type', 'Message id',
              'Dead reason', 'Dead at'].map(function (x) { return h('th', {scope: 'col', text: x}); }))),
            tbody);
          append(listWrap, h('div', {class: 'table-wrap'}, t));
        }
        page.forEach(function (job) { append(tbody, jobRow(job)); });
      }, function (e) {
        more.disabled = false;
        clear(listWrap);
        showApiError(box, e, 'Could not list the dead letters');
      });
    }

    function jobRow(job) {
      var open = h('button', {type: 'button', class: 'link-button inspect-job', text: String(job.id),
        'aria-label': 'Inspect job ' + job.id});
      var tr = h('tr', {dataset: {jobId: String(job.id)}},
        h('td', null, open), h('td', {text: job.destinationId || ''}),
        h('td', {text: String(job.type || '').toLowerCase()}),
        h('td', null, h('code', {text: job.messageId || ''})),
        h('td', {class: 'cell-error', text: job.deadReason || ''}),
        h('td', null, timeEl(num(job.deadAtUnixMs) || null)));
      open.addEventListener('click', function (ev) {
        ev.stopPropagation();
        inspect(job, tr);
      });
      tr.addEventListener('click', function () { inspect(job, tr); });
      return tr;
    }

    function inspect(job, tr) {
      Array.prototype.forEach.call(listWrap.querySelectorAll('tr.selected'), function (r) {
        r.classList.remove('selected');
      });
      tr.classList.add('selected');
      clear(detail);
      var dl = h('dl', {class: 'props'});
      [['Job', String(job.id)], ['Source', job.sourceId], ['Destination', job.destinationId],
        ['Type', String(job.type || '').toLowerCase()], ['Message id', job.messageId],
        ['User id', job.userId], ['Received', formatTime(num(job.receivedAtUnixMs) || '')],
        ['First attempt', formatTime(num(job.firstAttemptUnixMs) || '')],
        ['Attempts', String(job.attempts || 0)], ['Dead reason', job.deadReason],
        ['Dead at', formatTime(num(job.deadAtUnixMs) || '')]].forEach(function (p) {
        if (!p[1]) return;
        append(dl, h('div', null, h('dt', {text: p[0]}), h('dd', {text: p[1]})));
      });
      var body = decodeEvent(job.eventJson);
      var attemptRows = [];
      (job.history || []).forEach(function (a, i) {
        (a.urls && a.urls.length ? a.urls : [{}]).forEach(function (u, j) {
          attemptRows.push(h('tr', null,
            h('td', {text: j === 0 ? String(i + 1) : ''}),
            h('td', {text: j === 0 ? formatTime(num(a.atUnixMs) || '') : ''}),
            h('td', {class: 'cell-url', text: u.url || ''}),
            h('td', {text: u.status ? String(u.status) : 'no response'}),
            h('td', {class: 'num', text: u.latencyMs !== undefined ? num(u.latencyMs) + ' ms' : '—'}),
            h('td', {class: 'cell-error', text: u.error || '—'})));
        });
      });
      var close = h('button', {type: 'button', class: 'button-quiet', text: 'Close'});
      close.addEventListener('click', function () {
        detail.hidden = true;
        tr.classList.remove('selected');
        var b = tr.querySelector('button');
        if (b) b.focus();
      });
      append(detail, h('div', {class: 'title-row'}, h('h2', {id: 'job-title', tabindex: '-1',
        text: 'Job ' + job.id}), close), dl,
      h('h3', {text: 'Event'}), h('pre', {class: 'code-block', id: 'job-event', tabindex: '0',
        text: body}),
      h('h3', {text: 'Attempts'}), attemptRows.length ?
        table('Attempts of job ' + job.id + ', oldest first', ['#', 'At', 'URL', 'Status',
          'Latency', 'Error'], attemptRows, {id: 'job-attempts', captionHidden: true}) :
        h('p', {class: 'empty', text: 'No attempts recorded.'}));
      detail.hidden = false;
      detail.querySelector('h2').focus();
    }

    filterForm.addEventListener('submit', function (ev) {
      ev.preventDefault();
      load(false);
    });
    more.addEventListener('click', function () { load(true); });
    replay.addEventListener('click', function () {
      var f = filter();
      var all = !Object.keys(f).length;
      var shown = jobs.length + (nextToken ? '+' : '');
      var what = all ? 'every dead letter (' + shown + ' listed)' :
        'the dead letters matching this filter (' + shown + ' listed)';
      if (!window.confirm('Replay ' + what + '? They are delivered again with a fresh retry ' +
          'window.')) return;
      replay.disabled = true;
      api('POST', '/dead-letters:replay', all ? {all: true} : {filter: f}).then(function (r) {
        replay.disabled = false;
        var n = num(r.replayed);
        announce('Replayed ' + n + ' dead letter' + (n === 1 ? '' : 's') + '.', 'ok');
        load(false);
      }, function (e) {
        replay.disabled = false;
        showApiError(box, e, 'Could not replay');
        announce('Could not replay.', 'error');
      });
    });

    load(false);
  }

  // ---------------------------------------------------------------------------------------------
  // Deletion requests (SPEC §6.1): create one (after an in-page confirmation step: it cannot be
  // undone) and list those recorded, newest first.

  function viewDeletions(view) {
    append(view, pageHeading('Deletion requests'));
    append(view, h('p', {class: 'lead', text: 'Delete a user\'s data. Every enabled webhook ' +
      'destination of the affected sources gets a delete event for the user, and the user\'s ' +
      'undelivered jobs and dead letters of those sources are purged. This cannot be undone.'}));
    var box = errorBox('deletions-error');
    append(view, box.el);

    // The create form: fields, then a confirmation step in the page, then the new record.
    var formError = errorBox('deletion-form-error');
    var userIn = h('input', {type: 'text', id: 'deletion-user', autocomplete: 'off',
      spellcheck: 'false'});
    var userF = field('User id', userIn, 'The userId exactly as your sources send it.');
    var requestIn = h('input', {type: 'text', id: 'deletion-request-id', autocomplete: 'off',
      spellcheck: 'false'});
    var requestF = field('Request id (optional)', requestIn, 'An idempotency key, e.g. your ' +
      'ticket number: sending the same request id again does nothing twice.');
    var sourcesErr = groupError();
    var sourceList = h('div', {class: 'checkbox-list', id: 'deletion-sources'});
    var sourcesNote = h('p', {class: 'field-hint', id: 'deletion-sources-hint',
      text: 'Tick none to use every source this user was seen in.'});
    var sourceFieldset = h('fieldset', {class: 'choices', id: 'deletion-sources-fieldset',
      'aria-describedby': sourcesNote.id + ' ' + sourcesErr.el.id},
    h('legend', {text: 'Sources (optional)'}), sourceList, sourcesNote, sourcesErr.el);
    var sourceBoxes = [];
    var review = h('button', {type: 'submit', class: 'button-danger', id: 'deletion-review',
      text: 'Review deletion…'});
    var fields = h('fieldset', {id: 'deletion-fields'},
      h('legend', {class: 'visually-hidden', text: 'Deletion request'}),
      h('div', {class: 'field-row'}, userF.wrap, requestF.wrap), sourceFieldset,
      h('div', {class: 'actions'}, review));

    var confirmPanel = h('section', {class: 'confirm-panel', id: 'deletion-confirm-panel',
      hidden: true, role: 'group', 'aria-labelledby': 'deletion-confirm-title'});
    var resultPanel = h('section', {class: 'result-panel', id: 'deletion-result', hidden: true,
      'aria-labelledby': 'deletion-result-title', tabindex: '-1'});
    var form = h('form', {class: 'card', id: 'deletion-form', novalidate: true,
      'aria-labelledby': 'deletion-form-title'},
    h('h2', {id: 'deletion-form-title', text: 'Request a deletion'}), formError.el, fields,
    confirmPanel, resultPanel);
    append(view, form);
    confirmPanel.addEventListener('keydown', function (ev) {
      if (ev.key === 'Escape' && !confirmPanel.hidden) closeConfirm(review);
    });

    var listTitle = h('h2', {id: 'deletions-list-title', text: 'Recorded deletion requests'});
    var listWrap = h('div', {id: 'deletions-list'});
    var more = h('button', {type: 'button', id: 'deletions-more', text: 'Load more', hidden: true});
    append(view, listTitle, listWrap, h('div', {class: 'actions-inline'}, more));

    listAll('/sources', 'sources').then(function (sources) {
      if (!sources.length) {
        append(sourceList, h('p', {class: 'muted', text: 'No sources are configured.'}));
      }
      sources.forEach(function (src) {
        var id = 'deletion-source-' + src.id;
        var cb = h('input', {type: 'checkbox', id: id, value: src.id, class: 'deletion-source'});
        sourceBoxes.push(cb);
        append(sourceList, h('div', {class: 'choice-inline'}, cb,
          h('label', {for: id}, h('span', {text: src.name || src.id}),
            h('span', {class: 'muted', text: ' ' + src.id}))));
      });
    }, function (e) {
      if (e.authFailure) return;
      append(sourceList, h('p', {class: 'muted', text: 'Could not list the sources (' + e.message +
        '); leave them out to use every source the user was seen in.'}));
    });

    function clearErrors() {
      formError.hide();
      userF.setError('');
      requestF.setError('');
      sourcesErr.set('');
    }

    // The request as it will be sent: the user id exactly as typed (an id with spaces is
    // another user), the ticked sources, the request id when given.
    function buildBody() {
      var body = {userId: userIn.value};
      var ids = sourceBoxes.filter(function (cb) { return cb.checked; })
        .map(function (cb) { return cb.value; });
      if (ids.length) body.sourceIds = ids;
      if (requestIn.value.trim()) body.requestId = requestIn.value.trim();
      return body;
    }

    function closeConfirm(focus) {
      confirmPanel.hidden = true;
      clear(confirmPanel);
      fields.disabled = false;
      if (focus) focus.focus();
    }

    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      if (!confirmPanel.hidden) return;
      clearErrors();
      announce('');
      resultPanel.hidden = true;
      var body = buildBody();
      askConfirmation(body);
    });

    function askConfirmation(body) {
      clear(confirmPanel);
      var where = body.sourceIds ? [body.sourceIds.length === 1 ? 'source ' : 'sources ',
        body.sourceIds.map(function (id, i) {
          return [i ? ', ' : '', h('code', {text: id})];
        })] : 'every source this user was seen in';
      var user = body.userId ? h('code', {class: 'user-id', text: body.userId}) :
        h('em', {text: '(empty)'});
      var confirmBtn = h('button', {type: 'button', class: 'button-danger-solid',
        id: 'deletion-confirm', text: 'Delete this user\'s data'});
      var cancelBtn = h('button', {type: 'button', class: 'button-quiet', id: 'deletion-cancel',
        text: 'Cancel'});
      append(confirmPanel,
        h('h3', {id: 'deletion-confirm-title', tabindex: '-1', text: 'Confirm the deletion'}),
        h('p', {id: 'deletion-confirm-text'}, 'Delete the data of user ', user, ' in ', where,
          '? Each enabled webhook destination there gets a delete event, and the user\'s ' +
          'undelivered jobs and dead letters there are purged. This cannot be undone.'),
        body.userId !== body.userId.trim() ? h('p', {class: 'limit-note',
          text: 'The user id begins or ends with a space; it is sent exactly as typed.'}) : null,
        body.requestId ? h('p', {class: 'muted'}, 'Request id ',
          h('code', {text: body.requestId}), '.') : null,
        h('div', {class: 'actions'}, confirmBtn, cancelBtn));
      fields.disabled = true;
      confirmPanel.hidden = false;
      confirmPanel.querySelector('h3').focus();
      cancelBtn.addEventListener('click', function () { closeConfirm(review); });
      confirmBtn.addEventListener('click', function () {
        confirmBtn.disabled = true;
        cancelBtn.disabled = true;
        announce('Applying the deletion request…');
        api('POST', '/deletions', body).then(function (d) {
          closeConfirm(null);
          userIn.value = '';
          requestIn.value = '';
          sourceBoxes.forEach(function (cb) { cb.checked = false; });
          showResult(d);
          announce('Deletion request ' + d.id + ' completed.', 'ok');
          load(false, d.id);
        }, function (e) {
          closeConfirm(null);
          if (e.authFailure) return;
          showRefusal(e);
        });
      });
    }

    // The server's violations next to their fields (JSON or proto names); a NOT_FOUND names a
    // source, an ALREADY_EXISTS the request id.
    function showRefusal(e) {
      var left = [];
      var first = null;
      (e.violations || []).forEach(function (v) {
        var f = String(v.field || '').replace(/_/g, '').toLowerCase();
        var d = v.description || '';
        if (f === 'userid') {
          userF.setError(d, 'server');
          first = first || userIn;
        } else if (f === 'requestid') {
          requestF.setError(d, 'server');
          first = first || requestIn;
        } else if (f.indexOf('sourceids') === 0) {
          sourcesErr.set(d, 'server');
          first = first || sourceBoxes[0] || null;
        } else {
          left.push((v.field ? v.field + ': ' : '') + d);
        }
      });
      if (!(e.violations || []).length) {
        if (e.code === 'NOT_FOUND') {
          sourcesErr.set(e.message, 'server');
          first = sourceBoxes[0] || null;
        } else if (e.code === 'ALREADY_EXISTS') {
          requestF.setError(e.message, 'server');
          first = requestIn;
        }
      }
      formError.show('The collector refused the deletion request', e.message + codeSuffix(e),
        left);
      announce('The collector refused the deletion request.', 'error');
      if (first) {
        first.focus();
      } else {
        formError.el.focus();
      }
    }

    function sourcesText(d) {
      var ids = d.sourceIds || [];
      if (!ids.length) return d.sourcesFromIndex ? 'none (the user was not seen in any source)' :
        'none';
      return ids.join(', ') + (d.sourcesFromIndex ? ' (every source the user was seen in)' : '');
    }

    function showResult(d) {
      clear(resultPanel);
      var dl = h('dl', {class: 'props'});
      [['Id', d.id], ['User id', d.userId], ['Sources', sourcesText(d)],
        ['Request id', d.requestId || '—'], ['State', d.state || ''],
        ['Delete events sent', String(num(d.notifications))],
        ['Purged jobs', String(num(d.purgedJobs))],
        ['Purged dead letters', String(num(d.purgedDeadLetters))],
        ['Purged profile', d.purgedProfile ? 'yes' : 'no'],
        ['Created', formatTime(d.createTime)]].forEach(function (p) {
        append(dl, h('div', {dataset: {prop: p[0].toLowerCase().replace(/ /g, '-')}},
          h('dt', {text: p[0]}), h('dd', {text: p[1]})));
      });
      var close = h('button', {type: 'button', class: 'button-quiet', text: 'Close'});
      close.addEventListener('click', function () {
        resultPanel.hidden = true;
        userIn.focus();
      });
      append(resultPanel, h('div', {class: 'title-row'}, h('h3', {id: 'deletion-result-title',
        text: 'Deletion request ' + d.id + ' ' + (d.state === 'COMPLETED' ? 'completed' :
          String(d.state || '').toLowerCase())}), close), dl);
      resultPanel.hidden = false;
      resultPanel.focus();
    }

    var nextToken = '';
    var tbody = null;
    var shown = 0;

    function load(append_, highlight) {
      box.hide();
      if (!append_) {
        tbody = null;
        shown = 0;
        clear(listWrap);
        append(listWrap, loading());
      }
      more.disabled = true;
      var q = '?page_size=100' + (append_ && nextToken ? '&page_token=' + enc(nextToken) : '');
      api('GET', '/deletions' + q).then(function (r) {
        more.disabled = false;
        var page = r.deletions || [];
        nextToken = r.nextPageToken || '';
        more.hidden = !nextToken;
        if (!append_) clear(listWrap);
        shown += page.length;
        if (!shown) {
          append(listWrap, h('p', {class: 'empty', id: 'deletions-empty',
            text: 'No deletion requests yet.'}));
          return;
        }
        if (!tbody) {
          tbody = h('tbody');
          append(listWrap, h('div', {class: 'table-wrap'}, h('table', {class: 'data-table',
            id: 'deletions-table', 'aria-labelledby': listTitle.id},
          h('thead', null, h('tr', null, ['Id', 'User id', 'Sources', 'Delete events sent',
            'Purged jobs', 'Purged dead letters', 'Created'].map(function (x) {
            return h('th', {scope: 'col', text: x});
          }))), tbody)));
        }
        page.forEach(function (d) {
          var tr = deletionRow(d);
          if (d.id === highlight) tr.classList.add('highlight');
          append(tbody, tr);
        });
      }, function (e) {
        more.disabled = false;
        if (!append_) clear(listWrap);
        showApiError(box, e, 'Could not list the deletion requests');
      });
    }

    function deletionRow(d) {
      var ids = d.sourceIds || [];
      return h('tr', {dataset: {deletionId: d.id}},
        h('td', null, h('code', {text: d.id})),
        h('td', {class: 'cell-user', text: d.userId || ''}),
        h('td', null, ids.length ? ids.join(', ') : h('span', {class: 'muted', text: 'none'}),
          d.sourcesFromIndex ? h('span', {class: 'tag', text: 'where seen',
            title: 'No sources were given: every source the user was seen in'}) : null),
        h('td', {class: 'num', text: num(d.notifications).toLocaleString()}),
        h('td', {class: 'num', text: num(d.purgedJobs).toLocaleString()}),
        h('td', {class: 'num', text: num(d.purgedDeadLetters).toLocaleString()}),
        h('td', null, timeEl(d.createTime)));
    }

    more.addEventListener('click', function () { load(true); });
    load(false);
  }

  // ---------------------------------------------------------------------------------------------
  // Audiences (SPEC §6.2): the list (membership, last sync, Sync now, Delete after an in-row
  // confirmation) and a create form whose rule's conditions are JSON.

  // The trait an audience sets, as the collector derives it from the name
  // (common::AudienceTraitName): letters and digits of any script are kept, capitals of ASCII,
  // Latin-1, Greek and Cyrillic lower-cased; every run of anything else (spaces, punctuation,
  // symbols, emoji of any script) becomes one "_", none at either end.
  function traitSeparator(cp) {
    return (cp >= 0x80 && cp <= 0xBF) || cp === 0xD7 || cp === 0xF7 ||
      (cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
      (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0xFF3B && cp <= 0xFF40) ||
      (cp >= 0xFF5B && cp <= 0xFF65) || (cp >= 0x1F000 && cp <= 0x1FAFF);
  }

  function traitLower(cp) {
    if ((cp >= 0xC0 && cp <= 0xDE && cp !== 0xD7) || (cp >= 0x391 && cp <= 0x3A9 &&
        cp !== 0x3A2) || (cp >= 0x410 && cp <= 0x42F)) return cp + 0x20;
    if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
    return cp;
  }

  function traitName(name) {
    var out = '';
    var sep = false;
    Array.from(String(name || '')).forEach(function (ch) {
      var cp = ch.codePointAt(0);
      var keep = cp < 0x80 ? /[A-Za-z0-9]/.test(ch) : !traitSeparator(cp);
      if (!keep) {
        sep = out !== '';
        return;
      }
      if (sep) out += '_';
      sep = false;
      if (cp < 0x80) {
        out += ch.toLowerCase();
      } else if (cp < 0x800) {
        out += String.fromCodePoint(traitLower(cp));
      } else {
        out += ch;
      }
    });
    return out;
  }

  // One condition for people: `plan eq "pro"`, `"Order Completed" ≥ 3 times within 30d`.
  function conditionText(c) {
    if (c.trait) {
      return 'trait ' + c.trait + ' ' + (c.op || '?') +
        (c.value !== undefined && c.value !== null ? ' ' + JSON.stringify(c.value) : '');
    }
    if (c.event) {
      var counts = [];
      if (c.countGte !== undefined) counts.push('≥ ' + c.countGte);
      if (c.countLte !== undefined) counts.push('≤ ' + c.countLte);
      return 'event ' + JSON.stringify(c.event) + (counts.length ? ' ' + counts.join(' and ') +
        ' times' : '') + (c.within ? ' within ' + c.within : '');
    }
    return JSON.stringify(c);
  }

  function ruleText(rule) {
    var r = rule || {};
    var conditions = (r.conditions || []).map(conditionText);
    return (r.match || 'all') + ' of: ' + (conditions.length ? conditions.join('; ') :
      '(no condition)');
  }

  var CONDITIONS_EXAMPLE = '[\n' +
    '  {"trait": "plan", "op": "eq", "value": "pro"},\n' +
    '  {"event": "Order Completed", "countGte": 3, "within": "30d"}\n' +
    ']';

  function viewAudiences(view) {
    append(view, pageHeading('Audiences'));
    append(view, h('p', {class: 'lead', text: 'An audience is the users of some sources who ' +
      'match a rule. Its members are sent to the enabled webhook destinations of those sources ' +
      'as identify calls setting a trait (true on entering, false on leaving), at creation and ' +
      'at every sync.'}));
    var box = errorBox('audiences-error');
    append(view, box.el);
    var listWrap = h('div', {id: 'audiences-list'});
    append(view, listWrap);

    // The create form.
    var formError = errorBox('audience-form-error');
    var nameIn = h('input', {type: 'text', id: 'audience-name', autocomplete: 'off'});
    var traitOut = h('code', {id: 'audience-trait'});
    var traitLine = h('p', {class: 'field-hint trait-preview', id: 'audience-name-trait'},
      'Trait: ', traitOut);
    var nameF = field('Name', nameIn, null);
    nameF.wrap.insertBefore(traitLine, nameF.err);
    nameIn.setAttribute('aria-describedby', traitLine.id + ' ' + nameF.err.id);
    var idIn = h('input', {type: 'text', id: 'audience-id', autocomplete: 'off',
      spellcheck: 'false'});
    var idF = field('Id (optional)', idIn, 'Generated when empty.');
    var intervalIn = h('input', {type: 'number', id: 'audience-interval', min: '10',
      max: '86400', step: '1', inputmode: 'numeric', placeholder: '60'});
    var intervalF = field('Sync interval (seconds)', intervalIn, '10 to 86400; 60 when empty.');

    var sourcesErr = groupError();
    var sourceList = h('div', {class: 'checkbox-list', id: 'audience-sources'});
    var sourcesHint = h('p', {class: 'field-hint', id: 'audience-sources-hint',
      text: 'The sources whose users it reads; their enabled webhook destinations get the ' +
        'identify calls.'});
    var sourceBoxes = [];
    var sourceFieldset = h('fieldset', {class: 'choices', id: 'audience-sources-fieldset',
      'aria-describedby': sourcesHint.id + ' ' + sourcesErr.el.id},
    h('legend', {text: 'Sources'}), sourceList, sourcesHint, sourcesErr.el);

    var matchErr = groupError();
    var matchAll = h('input', {type: 'radio', name: 'audience-match', id: 'audience-match-all',
      value: 'all', checked: true});
    var matchAny = h('input', {type: 'radio', name: 'audience-match', id: 'audience-match-any',
      value: 'any'});
    var matchFieldset = h('fieldset', {class: 'choices', id: 'audience-match',
      'aria-describedby': matchErr.el.id},
    h('legend', {text: 'Users must match'}),
    h('div', {class: 'checkbox-list'},
      h('div', {class: 'choice-inline'}, matchAll,
        h('label', {for: matchAll.id, text: 'all of the conditions'})),
      h('div', {class: 'choice-inline'}, matchAny,
        h('label', {for: matchAny.id, text: 'any of the conditions'}))), matchErr.el);

    var rulesIn = h('textarea', {id: 'audience-conditions', class: 'code-input conditions-input',
      rows: '7', spellcheck: 'false', placeholder: CONDITIONS_EXAMPLE});
    var rulesF = field('Conditions (JSON)', rulesIn, null);
    var rulesHint = h('div', {class: 'field-hint', id: 'audience-conditions-hint'},
      h('p', null, 'A JSON array of conditions, e.g. the placeholder. A trait condition has ',
        h('code', {text: 'trait'}), ', ', h('code', {text: 'op'}), ' (eq neq gt gte lt lte ' +
        'exists contains) and ', h('code', {text: 'value'}), ' (none for exists). An event ' +
        'condition has ', h('code', {text: 'event'}), ', ', h('code', {text: 'countGte'}),
        ' and/or ', h('code', {text: 'countLte'}), ', and ', h('code', {text: 'within'}),
        ' (15m, 1h, 30d).'));
    rulesF.wrap.insertBefore(rulesHint, rulesF.err);
    rulesIn.setAttribute('aria-describedby', rulesHint.id + ' ' + rulesF.err.id);
    var useExample = h('button', {type: 'button', class: 'button-small', id: 'audience-example',
      text: 'Use the example'});
    append(rulesF.wrap, h('div', {class: 'actions-inline'}, useExample));

    var createBtn = h('button', {type: 'submit', class: 'button-primary', id: 'create-audience',
      text: 'Create audience'});
    var form = h('form', {class: 'card', id: 'audience-form', novalidate: true,
      'aria-labelledby': 'audience-form-title'},
    h('h2', {id: 'audience-form-title', text: 'Create an audience'}), formError.el,
    h('div', {class: 'field-row'}, nameF.wrap, idF.wrap, intervalF.wrap), sourceFieldset,
    matchFieldset, rulesF.wrap, h('div', {class: 'actions'}, createBtn));
    append(view, form);

    function showTrait() {
      var t = traitName(nameIn.value);
      traitOut.textContent = t || '—';
      traitOut.classList.toggle('muted', !t);
    }
    nameIn.addEventListener('input', showTrait);
    showTrait();
    useExample.addEventListener('click', function () {
      rulesIn.value = CONDITIONS_EXAMPLE;
      rulesF.setError('');
      rulesIn.focus();
    });

    listAll('/sources', 'sources').then(function (sources) {
      if (!sources.length) {
        append(sourceList, h('p', {class: 'muted', id: 'audience-no-sources'},
          'No sources yet. ', h('a', {href: '#/sources', text: 'Create one'}), ' first.'));
      }
      sources.forEach(function (src) {
        var id = 'audience-source-' + src.id;
        var cb = h('input', {type: 'checkbox', id: id, value: src.id, class: 'audience-source'});
        sourceBoxes.push(cb);
        append(sourceList, h('div', {class: 'choice-inline'}, cb,
          h('label', {for: id}, h('span', {text: src.name || src.id}),
            h('span', {class: 'muted', text: ' ' + src.id}))));
      });
    }, function (e) {
      if (e.authFailure) return;
      append(sourceList, h('p', {class: 'muted', text: 'Could not list the sources (' +
        e.message + ').'}));
    });

    var sentSources = [];  // the ids ticked when the form was sent (sources[i] in an error)

    function clearErrors() {
      formError.hide();
      [nameF, idF, intervalF, rulesF].forEach(function (f) { f.setError(''); });
      sourcesErr.set('');
      matchErr.set('');
    }

    // The conditions from the textarea: an array, a single condition, or a whole rule object
    // (whose match then wins over the radio buttons). Null with a hint next to the field when
    // it is not JSON.
    function readConditions() {
      var text = rulesIn.value.trim();
      if (!text) {
        rulesF.setError('Give at least one condition, e.g. the placeholder\'s.', 'client');
        return null;
      }
      var parsed;
      try {
        parsed = JSON.parse(text);
      } catch (err) {
        rulesF.setError('Not JSON: ' + err.message, 'client');
        return null;
      }
      if (Array.isArray(parsed)) return {conditions: parsed};
      if (parsed && typeof parsed === 'object') {
        if (Array.isArray(parsed.conditions)) {
          return {match: parsed.match, conditions: parsed.conditions};
        }
        return {conditions: [parsed]};
      }
      rulesF.setError('Not a JSON array of conditions (see the placeholder).', 'client');
      return null;
    }

    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      clearErrors();
      announce('');
      var read = readConditions();
      if (!read) {
        rulesIn.focus();
        return;
      }
      var match = read.match || (matchAny.checked ? 'any' : 'all');
      var body = {
        name: nameIn.value.trim(),
        sources: sourceBoxes.filter(function (cb) { return cb.checked; })
          .map(function (cb) { return cb.value; }),
        rule: {match: match, conditions: read.conditions}
      };
      sentSources = body.sources;
      if (idIn.value.trim()) body.id = idIn.value.trim();
      if (intervalIn.value.trim()) {
        var n = Number(intervalIn.value.trim());
        // A number the server can judge (it names the limit); anything else as typed.
        body.syncIntervalSeconds = Number.isInteger(n) && n >= 0 ? n : intervalIn.value.trim();
      }
      createBtn.disabled = true;
      announce('Creating the audience and computing its members…');
      api('POST', '/audiences', body).then(function (a) {
        createBtn.disabled = false;
        nameIn.value = '';
        idIn.value = '';
        intervalIn.value = '';
        rulesIn.value = '';
        matchAll.checked = true;
        sourceBoxes.forEach(function (cb) { cb.checked = false; });
        showTrait();
        var members = num(a.members);
        announce('Created audience ' + (a.name || a.id) + ' (trait ' + a.trait + '): ' +
          members + ' member' + (members === 1 ? '' : 's') + '.', 'ok');
        load(a.id);
      }, function (e) {
        createBtn.disabled = false;
        if (e.authFailure) return;
        showRefusal(e);
      });
    });

    // The server's violations next to their fields: name, id, syncIntervalSeconds, sources[i]
    // to the sources group, rule.* (rule.conditions[0].op, …) to the conditions textarea with
    // the path inside the rule. A NOT_FOUND without violations names a source; an
    // ALREADY_EXISTS the id.
    function showRefusal(e) {
      var left = [];
      var first = null;
      (e.violations || []).forEach(function (v) {
        // Paths are the resource's; a gRPC-style "audience." prefix is dropped.
        var raw = String(v.field || '').replace(/^audience\./, '');
        var f = raw.replace(/_/g, '').toLowerCase();
        var d = v.description || '';
        if (f === 'name' || f === 'trait') {
          nameF.setError(d, 'server');
          first = first || nameIn;
        } else if (f === 'id') {
          idF.setError(d, 'server');
          first = first || idIn;
        } else if (f === 'syncintervalseconds' || f === 'syncinterval') {
          intervalF.setError(d, 'server');
          first = first || intervalIn;
        } else if (f.indexOf('sources') === 0) {
          var m = /^sources\[(\d+)\]/.exec(raw);
          var named = m && sentSources[Number(m[1])];
          sourcesErr.set((named ? '"' + named + '": ' : '') + d, 'server');
          first = first || sourceBoxes[0] || null;
        } else if (f === 'rule.match') {
          matchErr.set(d, 'server');
          first = first || matchAll;
        } else if (f === 'rule' || f.indexOf('rule.') === 0) {
          var path = raw.replace(/^rule\.?/, '');
          rulesF.setError((path ? path + ': ' : '') + d, 'server');
          first = first || rulesIn;
        } else {
          left.push((raw ? raw + ': ' : '') + d);
        }
      });
      if (!(e.violations || []).length) {
        if (e.code === 'NOT_FOUND') {
          sourcesErr.set(e.message, 'server');
          first = sourceBoxes[0] || null;
        } else if (e.code === 'ALREADY_EXISTS') {
          idF.setError(e.message, 'server');
          first = idIn;
        }
      }
      formError.show('The collector refused the audience', e.message + codeSuffix(e), left);
      announce('The collector refused the audience.', 'error');
      if (first) {
        first.focus();
      } else {
        formError.el.focus();
      }
    }

    var tbody = null;

    // Renders the list; `after` runs once it is shown (to place the focus).
    function load(highlight, after) {
      box.hide();
      clear(listWrap);
      append(listWrap, loading());
      tbody = null;
      listAll('/audiences', 'audiences').then(function (audiences) {
        clear(listWrap);
        if (!audiences.length) {
          append(listWrap, h('p', {class: 'empty', id: 'audiences-empty',
            text: 'No audiences yet. Create one below.'}));
          if (after) after();
          return;
        }
        tbody = h('tbody', null, audiences.map(function (a) {
          var tr = audienceRow(a);
          if (a.id === highlight) tr.classList.add('highlight');
          return tr;
        }));
        append(listWrap, h('div', {class: 'table-wrap'}, h('table', {class: 'data-table',
          id: 'audiences-table'}, h('caption', {class: 'visually-hidden', text: 'Audiences'}),
        h('thead', null, h('tr', null, ['Name', 'Trait', 'Sources', 'Members', 'Last sync',
          'Entered', 'Exited', 'Actions'].map(function (x) {
          return h('th', {scope: 'col', text: x});
        }))), tbody)));
        if (after) after();
      }, function (e) {
        clear(listWrap);
        showApiError(box, e, 'Could not list the audiences');
      });
    }

    function audienceRow(a) {
      var file = fileOf(a.managedBy);
      var s = a.lastSync;
      var label = a.name || a.id;
      var actions = h('div', {class: 'row-buttons'});
      var sync = h('button', {type: 'button', class: 'button-small sync-audience',
        text: 'Sync now', 'aria-label': 'Sync ' + label + ' now'});
      append(actions, sync);
      var confirmBox = h('div', {class: 'row-confirm', role: 'group', hidden: true,
        'aria-label': 'Confirm deleting ' + label});
      var del = null;
      if (!file) {
        del = h('button', {type: 'button', class: 'button-small button-danger delete-audience',
          text: 'Delete', 'aria-label': 'Delete ' + label});
        append(actions, del);
      }
      var tr = h('tr', {dataset: {audienceId: a.id}, class: file ? 'read-only' : null},
        h('td', {class: 'cell-name'}, h('span', {class: 'audience-name', text: label}), h('br'),
          h('code', {class: 'muted', text: a.id}),
          h('small', {class: 'rule-summary muted', text: ruleText(a.rule)})),
        h('td', null, h('code', {class: 'trait', text: a.trait || ''})),
        h('td', {text: (a.sources || []).join(', ')}),
        h('td', {class: 'num cell-members', text: num(a.members).toLocaleString()}),
        h('td', {class: 'cell-last-sync'}, s ? [timeEl(s.time),
          s.first ? h('span', {class: 'tag', text: 'first',
            title: 'The first computation, at creation'}) : null,
          h('br'), h('small', {class: 'muted', text: num(s.evaluated).toLocaleString() +
            ' evaluated in ' + num(s.durationMs) + ' ms'})] :
          h('span', {class: 'muted', text: 'never'})),
        h('td', {class: 'num cell-entered', text: s ? num(s.entered).toLocaleString() : '—'}),
        h('td', {class: 'num cell-exited', text: s ? num(s.exited).toLocaleString() : '—'}),
        h('td', {class: 'cell-actions'}, actions, confirmBox,
          file ? h('p', {class: 'note', text: 'defined in ' + file}) : null));

      sync.addEventListener('click', function () {
        sync.disabled = true;
        announce('Syncing ' + label + '…');
        api('POST', '/audiences/' + enc(a.id) + ':sync', {}).then(function (after) {
          var fresh = audienceRow(after);
          fresh.classList.add('highlight');
          tr.parentNode.replaceChild(fresh, tr);
          var ls = after.lastSync || {};
          announce('Synced ' + label + ': ' + num(ls.entered) + ' entered, ' + num(ls.exited) +
            ' exited, ' + num(after.members) + ' member' + (num(after.members) === 1 ? '' : 's') +
            '.', 'ok');
          fresh.querySelector('.sync-audience').focus();
        }, function (e) {
          sync.disabled = false;
          showApiError(box, e, 'Could not sync ' + label);
          announce('Could not sync ' + label + '.', 'error');
        });
      });

      if (del) {
        var closeConfirm = function () {
          confirmBox.hidden = true;
          clear(confirmBox);
          actions.hidden = false;
          del.focus();
        };
        confirmBox.addEventListener('keydown', function (ev) {
          if (ev.key === 'Escape' && !confirmBox.hidden) closeConfirm();
        });
        del.addEventListener('click', function () {
          clear(confirmBox);
          var yes = h('button', {type: 'button',
            class: 'button-small button-danger-solid confirm-delete-audience', text: 'Delete',
            'aria-label': 'Yes, delete ' + label});
          var no = h('button', {type: 'button', class: 'button-small button-quiet ' +
            'cancel-delete-audience', text: 'Cancel'});
          append(confirmBox, h('p', {class: 'row-confirm-text'}, 'Delete ',
            h('strong', {text: label}), '? No identify is sent to its members.'),
          h('div', {class: 'row-buttons'}, yes, no));
          actions.hidden = true;
          confirmBox.hidden = false;
          no.focus();
          no.addEventListener('click', closeConfirm);
          yes.addEventListener('click', function () {
            yes.disabled = true;
            no.disabled = true;
            announce('Deleting audience ' + label + '…');
            api('DELETE', '/audiences/' + enc(a.id)).then(function () {
              announce('Deleted audience ' + label + '.', 'ok');
              // The focus was in the removed row: to the first row left, else to the form.
              load('', function () {
                (listWrap.querySelector('button.sync-audience') || nameIn).focus();
              });
            }, function (e) {
              closeConfirm();
              showApiError(box, e, 'Could not delete ' + label);
              announce('Could not delete ' + label + '.', 'error');
            });
          });
        });
      }
      return tr;
    }

    load();
  }

  // eventJson is `bytes`: base64 in protobuf JSON (standard or URL-safe alphabet). Pretty-printed.
  function decodeEvent(b64) {
    if (!b64) return '(no event body)';
    var text;
    try {
      var s = String(b64).replace(/-/g, '+').replace(/_/g, '/');
      while (s.length % 4) s += '=';
      var bin = atob(s);
      var bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      text = new TextDecoder('utf-8').decode(bytes);
    } catch (e) {
      return '(the event body is not valid base64: ' + e.message + ')';
    }
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (ignored) {
      return text;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Start

  document.getElementById('sign-out').addEventListener('click', function () {
    signOut('Sign in again to go on.', 'You signed out');
    pendingRoute = '';
  });
  document.getElementById('skip-link').addEventListener('click', function (ev) {
    ev.preventDefault();
    document.getElementById('main').focus();
  });
  window.addEventListener('hashchange', route);
  route();
}());
