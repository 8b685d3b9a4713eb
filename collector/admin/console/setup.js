// hookrelay console: the setup page (a new destination, or one being edited), its sources' write keys
// and the test delivery. Loaded after core.js.
'use strict';

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
