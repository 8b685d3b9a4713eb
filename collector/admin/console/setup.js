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

// The setup form. Its sections are built by the setupXxxStep functions below, which keep
// their controls and the form's state in `ctx` (the form's one mutable object): the stored
// destination once saved (editing), the chosen type, and what the last request sent (sentRows,
// sentSources) to place the server's field violations.
function buildSetup(view, catalog, sources, existing) {
  var ctx = {view: view, catalog: catalog, sources: sources, existing: existing};
  ctx.types = (ctx.catalog.destinationTypes && ctx.catalog.destinationTypes.length) ?
    ctx.catalog.destinationTypes : [DEFAULT_TYPE];
  ctx.editing = ctx.existing;  // the stored destination once saved (PATCH from then on)
  ctx.chosenType = ctx.existing ? findType(ctx, ctx.existing.type || 'webhooks') : null;
  ctx.readOnlyFile = ctx.existing ? fileOf(ctx.existing.managedBy) : '';
  ctx.sentRows = [];   // request index → URL row, for the server's field paths
  ctx.sentSources = [];

  ctx.h1 = ctx.view.querySelector('h1');
  ctx.formError = errorBox('form-error');
  ctx.form = h('form', {class: 'setup', novalidate: true, id: 'setup-form'});
  ctx.form.addEventListener('submit', function (ev) {
    ev.preventDefault();
    save(ctx);
  });
  if (ctx.readOnlyFile) {
    append(ctx.view, h('p', {class: 'note read-only-note', text: 'This destination is defined in ' +
      ctx.readOnlyFile + '; change it there. It is read-only here, but you can send a test event.'}));
  }
  append(ctx.view, ctx.formError.el);

  setupTypeStep(ctx);
  setupSourcesStep(ctx);
  setupUrlsStep(ctx);
  setupSecretStep(ctx);
  setupSaveStep(ctx);
  setupTestStep(ctx);

  append(ctx.view, ctx.form);
  setupJsonEditor(ctx);

  // Read-only (file-defined) destinations: every input of the form is disabled.
  if (ctx.readOnlyFile) {
    Array.prototype.forEach.call(ctx.form.querySelectorAll('input, select, textarea, button'), function (el) {
      if (el !== ctx.testBtn) el.disabled = true;
    });
    ctx.jsonSend.disabled = true;
  }

  revealSteps(ctx);
  if (ctx.editing) {
    enterEditMode(ctx, ctx.editing);
  } else {
    ctx.testBtn.disabled = true;
  }
  if (ctx.readOnlyFile) ctx.testBtn.disabled = false;
}

// Step 1: destination type from the catalog.
function setupTypeStep(ctx) {
  ctx.s1 = step(1, 'Choose a destination type', 'Pick the kind of destination from the catalog.');
  ctx.typeErr = groupError();
  ctx.typeFieldset = h('fieldset', {class: 'choices'}, h('legend', {class: 'visually-hidden',
    text: 'Destination type'}));
  ctx.types.forEach(function (t) {
    var id = 'type-' + t.type;
    var radio = h('input', {type: 'radio', name: 'destination-type', id: id, value: t.type,
      checked: ctx.chosenType && ctx.chosenType.type === t.type, disabled: !!ctx.existing});
    radio.addEventListener('change', function () {
      ctx.chosenType = t;
      revealSteps(ctx);
      updateLimits(ctx);
    });
    append(ctx.typeFieldset, h('div', {class: 'choice'}, radio,
      h('label', {for: id}, h('span', {class: 'choice-name', text: t.name || t.type}),
        t.description ? h('span', {class: 'choice-description', text: t.description}) : null,
        h('span', {class: 'choice-limits', text: 'Up to ' + (t.maxUrls || 5) + ' URLs, ' +
          (t.maxHeadersPerUrl || 5) + ' headers per URL.'}))));
  });
  append(ctx.typeFieldset, ctx.typeErr.el);
  append(ctx.s1, ctx.typeFieldset);
  append(ctx.form, ctx.s1);
}

// Step 2: sources.
function setupSourcesStep(ctx) {
  ctx.s2 = step(2, 'Choose sources', 'The destination receives the events of the sources you ' +
    'tick. Create a source here if you have none yet.');
  ctx.sourcesErr = groupError();
  ctx.sourceList = h('div', {class: 'checkbox-list', id: 'source-choices'});
  ctx.sourceEmpty = h('p', {class: 'empty', text: 'No sources yet. Create one below.'});
  ctx.sourceFieldset = h('fieldset', {class: 'choices', id: 'sources-fieldset'},
    h('legend', {text: 'Sources'}), ctx.sourceEmpty, ctx.sourceList, ctx.sourcesErr.el);
  ctx.sourceBoxes = {};  // id → checkbox
  ctx.selected = ctx.existing ? (ctx.existing.sources || []) : [];
  ctx.sources.forEach(function (src) { addSourceChoice(ctx, src, ctx.selected.indexOf(src.id) >= 0); });
  // Sources named by the destination but not listed (should not happen) still round-trip.
  ctx.selected.forEach(function (id) {
    if (!ctx.sourceBoxes[id]) addSourceChoice(ctx, {id: id, name: id, kind: 'unknown'}, true);
  });
  ctx.sourceEmpty.hidden = Object.keys(ctx.sourceBoxes).length > 0;
  append(ctx.s2, ctx.sourceFieldset);

  // Inline "create source" (its own button; Enter in its fields creates the source).
  ctx.newSourceError = errorBox('new-source-error');
  ctx.newName = h('input', {type: 'text', id: 'new-source-name', autocomplete: 'off'});
  ctx.newKind = h('select', {id: 'new-source-kind'}, (ctx.catalog.sourceKinds && ctx.catalog.sourceKinds
    .length ? ctx.catalog.sourceKinds : ['web', 'mobile', 'server']).map(function (k) {
    return h('option', {value: k, text: k});
  }));
  ctx.newNameField = field('Name', ctx.newName, null);
  ctx.newKindField = field('Kind', ctx.newKind, null);
  ctx.createBtn = h('button', {type: 'button', id: 'create-source', text: 'Create source'});
  ctx.keyPanel = h('div', {class: 'key-panel', id: 'new-key-panel', hidden: true});
  ctx.createPanel = h('div', {class: 'subpanel', role: 'group', 'aria-labelledby': 'create-source-title'},
    h('h3', {id: 'create-source-title', text: 'Create a source'}), ctx.newSourceError.el,
    h('div', {class: 'field-row'}, ctx.newNameField.wrap, ctx.newKindField.wrap,
      h('div', {class: 'field field-button'}, ctx.createBtn)), ctx.keyPanel);
  append(ctx.s2, ctx.createPanel);
  ctx.newName.addEventListener('keydown', function (ev) {
    if (ev.key === 'Enter') {
      ev.preventDefault();
      createSource(ctx);
    }
  });
  ctx.createBtn.addEventListener('click', function () { createSource(ctx); });
  append(ctx.form, ctx.s2);
}

// Step 4: shared secret.
function setupSecretStep(ctx) {
  ctx.s4 = step(4, 'Shared secret (optional)', 'With a shared secret every request carries ' +
    'X-Signature: the hex HMAC-SHA1 of the body, so the receiver can check it came from ' +
    'hookrelay.');
  ctx.secret = h('input', {type: 'password', id: 'shared-secret', autocomplete: 'new-password',
    spellcheck: 'false'});
  ctx.toggleSecret = h('button', {type: 'button', id: 'toggle-secret', class: 'button-small',
    'aria-pressed': 'false', 'aria-controls': 'shared-secret', text: 'Show'});
  ctx.toggleSecret.addEventListener('click', function () {
    var show = ctx.secret.type === 'password';
    ctx.secret.type = show ? 'text' : 'password';
    ctx.toggleSecret.textContent = show ? 'Hide' : 'Show';
    ctx.toggleSecret.setAttribute('aria-pressed', show ? 'true' : 'false');
  });
  ctx.secretField = field('Shared secret', ctx.secret, null, ctx.toggleSecret);
  ctx.removeSecret = h('input', {type: 'checkbox', id: 'remove-secret'});
  ctx.removeSecretWrap = h('div', {class: 'choice-inline', hidden: true}, ctx.removeSecret,
    h('label', {for: 'remove-secret', text: 'Remove the shared secret (requests are no longer ' +
      'signed)'}));
  ctx.removeSecret.addEventListener('change', function () {
    ctx.secret.disabled = ctx.removeSecret.checked;
  });
  append(ctx.s4, ctx.secretField.wrap, ctx.removeSecretWrap);
  setupSecretRotation(ctx);
  append(ctx.form, ctx.s4);
}

// Step 5: id and enable, then save.
function setupSaveStep(ctx) {
  ctx.s5 = step(5, 'Name and enable', 'Events flow as soon as an enabled destination is saved.');
  ctx.idInput = h('input', {type: 'text', id: 'destination-id', autocomplete: 'off',
    spellcheck: 'false', placeholder: 'orders-hook'});
  ctx.idField = field('Destination id', ctx.idInput, '1 to 64 characters: letters, digits, _ and -. ' +
    'Leave it empty to get a generated id.');
  ctx.idInput.addEventListener('blur', function () {
    afterPointer(function () {
      if (ctx.idField.source() === 'server' || ctx.idInput.readOnly) return;
      var v = ctx.idInput.value.trim();
      ctx.idField.setError(v && !ID_RE.test(v) ? 'Use 1 to 64 characters: letters, digits, _ and -.' :
        '', 'client');
    });
  });
  ctx.enabled = switchInput('destination-enabled', 'Enabled', ctx.existing ? !!ctx.existing.enabled : false);
  ctx.enabledErr = h('p', {class: 'field-error', id: 'destination-enabled-error', hidden: true});
  ctx.enabled.input.setAttribute('aria-describedby', 'destination-enabled-hint ' + ctx.enabledErr.id);
  ctx.saveBtn = h('button', {type: 'submit', class: 'button-primary', id: 'save-destination',
    text: 'Save destination'});
  // Protection (optional): the destination's rate limit and circuit breaker. The other
  // delivery options (timeout, retry window, backoff) are kept as they are.
  ctx.rateIn = h('input', {type: 'number', id: 'rate-limit', min: '1', max: '100000', step: '1',
    inputmode: 'numeric', placeholder: 'no limit'});
  ctx.rateField = field('Rate limit (attempts per second)', ctx.rateIn, 'Empty: no limit. 1 to ' +
    '100,000; jobs beyond it wait in the store, no attempt is spent.');
  ctx.breakerIn = h('input', {type: 'number', id: 'breaker-failures', min: '1', max: '1000',
    step: '1', inputmode: 'numeric', placeholder: 'no breaker'});
  ctx.breakerField = field('Circuit breaker: pause after this many failures in a row',
    ctx.breakerIn, 'Empty: no breaker. 1 to 1,000; attempts then pause (5 s, doubling up to ' +
    '5 min) instead of each job spending its own retries.');
  ctx.protection = h('details', {class: 'protection', id: 'protection-options'},
    h('summary', {text: 'Protection (optional): rate limit and circuit breaker'}),
    ctx.rateField.wrap, ctx.breakerField.wrap);
  setupBatch(ctx);
  setupOrdering(ctx);
  setupFilter(ctx);  // setup_filter.js
  append(ctx.s5, ctx.idField.wrap, h('div', {class: 'field'}, ctx.enabled.label,
    h('p', {class: 'field-hint', id: 'destination-enabled-hint', text: 'A disabled destination ' +
      'receives nothing; events are not queued for it.'}), ctx.enabledErr),
    ctx.protection, ctx.batchDetails, ctx.orderDetails, ctx.filterDetails,
    h('div', {class: 'actions'},
      ctx.saveBtn));
  append(ctx.form, ctx.s5);
}

// Batched webhooks (optional, SPEC §5.4): options.batch. Checked, the deliverer sends several
// jobs per request as {"batch":[…]}; unchecked, batch is left out of the options (one job per
// request). The limits are the collector's (common/config_validate.cc); the checks below are
// hints on blur only, and the collector's answer goes next to the field it names.
var BATCH_FIELDS = [
  // key in options.batch, input id, label, name in the hints, min, max, default, hint
  {key: 'maxEvents', id: 'batch-max-events', label: 'Events per request (at most)',
    name: 'Events per request', min: 1, max: 1000, def: 100,
    hint: 'events; the request goes out once it holds this many.'},
  {key: 'maxBytes', id: 'batch-max-bytes', label: 'Request body size (bytes, at most)',
    name: 'Request body size', min: 1000, max: 500000, def: 500000,
    hint: 'bytes; a job that would pass it starts the next request.'},
  {key: 'maxWaitMs', id: 'batch-max-wait-ms', label: 'Wait for more events (ms, at most)',
    name: 'Wait for more events', min: 10, max: 10000, def: 1000,
    hint: 'ms after the first job of a request; then it goes out with what it holds.'}
];

function setupBatch(ctx) {
  ctx.batchOn = h('input', {type: 'checkbox', id: 'batch-enabled'});
  ctx.batchOnErr = h('p', {class: 'field-error', id: 'batch-enabled-error', hidden: true});
  ctx.batchOn.setAttribute('aria-describedby', 'batch-enabled-hint ' + ctx.batchOnErr.id);
  ctx.batchOn.setAttribute('aria-controls', 'batch-fields');
  ctx.batchFields = {};
  var row = h('div', {class: 'field-row'});
  BATCH_FIELDS.forEach(function (b) {
    var input = h('input', {type: 'number', id: b.id, min: String(b.min), max: String(b.max),
      step: '1', inputmode: 'numeric', value: String(b.def)});
    var f = field(b.label, input, b.min.toLocaleString('en') + ' to ' +
      b.max.toLocaleString('en') + ' ' + b.hint + ' Default ' + b.def.toLocaleString('en') + '.');
    input.addEventListener('blur', function () {
      afterPointer(function () { checkBatchField(ctx, b); });
    });
    ctx.batchFields[b.key] = f;
    append(row, f.wrap);
  });
  ctx.batchFieldsWrap = h('div', {class: 'batch-fields', id: 'batch-fields', role: 'group',
    'aria-label': 'Batch limits', hidden: true}, row);
  ctx.batchOn.addEventListener('change', function () {
    ctx.batchFieldsWrap.hidden = !ctx.batchOn.checked;
  });
  ctx.batchDetails = h('details', {class: 'protection batch', id: 'batch-options'},
    h('summary', {text: 'Batched webhooks (optional): several events per request'}),
    h('div', {class: 'field'}, h('div', {class: 'choice-inline'}, ctx.batchOn,
      h('label', {for: 'batch-enabled', text: 'Send several events per request'})),
      h('p', {class: 'field-hint', id: 'batch-enabled-hint', text: 'The receiver gets ' +
        '{"batch":[…]} with up to the limits below in one signed request, and answers for all ' +
        'of them. Unticked: one event per request.'}), ctx.batchOnErr),
    ctx.batchFieldsWrap);
}

// Per-user order (optional, SPEC §5.4): options.ordering "per_user" when ticked, left out
// otherwise.
function setupOrdering(ctx) {
  ctx.orderOn = h('input', {type: 'checkbox', id: 'ordering-per-user'});
  ctx.orderErr = h('p', {class: 'field-error', id: 'ordering-per-user-error', hidden: true});
  ctx.orderOn.setAttribute('aria-describedby', 'ordering-per-user-hint ' + ctx.orderErr.id);
  ctx.orderDetails = h('details', {class: 'protection ordering', id: 'ordering-options'},
    h('summary', {text: 'Order (optional): each user\'s events in order'}),
    h('div', {class: 'field'}, h('div', {class: 'choice-inline'}, ctx.orderOn,
      h('label', {for: 'ordering-per-user', text: 'Deliver each user\'s events in the order ' +
        'they were received'})),
      h('p', {class: 'field-hint', id: 'ordering-per-user-hint', text: 'By userId, else ' +
        'anonymousId: one request per user at a time, and a user whose event is retrying waits ' +
        'while other users\' events flow.'}), ctx.orderErr));
}

// A hint on blur: the field's value is a whole number within the collector's limits.
function checkBatchField(ctx, b) {
  var f = ctx.batchFields[b.key];
  if (f.source() === 'server') return;
  var v = f.input.value.trim();
  var msg = '';
  if (ctx.batchOn.checked && v) {
    var n = Number(v);
    if (!/^\d+$/.test(v) || n < b.min || n > b.max) {
      msg = b.name + ' (' + b.key + '): ' + v + ' is out of range; use a whole number from ' +
        b.min.toLocaleString('en') + ' to ' + b.max.toLocaleString('en') + '.';
    }
  }
  f.setError(msg, 'client');
}

// The stored options.batch in the form (defaults when the destination sends one job per request).
function fillBatch(ctx, batch) {
  ctx.batchOn.checked = !!batch;
  ctx.batchFieldsWrap.hidden = !batch;
  BATCH_FIELDS.forEach(function (b) {
    var v = batch && batch[b.key] ? num(batch[b.key]) : b.def;
    ctx.batchFields[b.key].input.value = String(v);
  });
  ctx.batchDetails.open = !!batch;
}

// options.batch as the form has it, or null when unticked; an empty field is left to the
// collector's default. Keys in the API's order, so an unchanged batch compares equal.
function batchBody(ctx) {
  if (!ctx.batchOn.checked) return null;
  var out = {};
  BATCH_FIELDS.forEach(function (b) {
    var v = ctx.batchFields[b.key].input.value.trim();
    if (v) out[b.key] = Number(v);
  });
  return out;
}

// Step 6: test.
function setupTestStep(ctx) {
  ctx.s6 = step(6, 'Send a test event', 'A sample track event goes through the normal ' +
    'pipeline to this destination only (even when disabled), and you see each receiver\'s answer.');
  ctx.testBtn = h('button', {type: 'button', id: 'send-test', text: 'Send test event'});
  ctx.testNote = h('p', {class: 'field-hint', id: 'send-test-note',
    text: 'Save the destination first.'});
  ctx.testBtn.setAttribute('aria-describedby', ctx.testNote.id);
  ctx.testOut = h('div', {class: 'test-output', id: 'test-output'});
  ctx.testError = errorBox('test-error');
  append(ctx.s6, h('div', {class: 'actions-inline'}, ctx.testBtn, ctx.testNote), ctx.testError.el, ctx.testOut);
  ctx.testBtn.addEventListener('click', function () {
    if (!ctx.editing) return;
    ctx.testError.hide();
    runTest(ctx.editing.id, ctx.testBtn, ctx.testOut, ctx.testError);
  });
  append(ctx.form, ctx.s6);
}

// Advanced: the request as JSON (any body the API accepts, e.g. to see its limits).
function setupJsonEditor(ctx) {
  ctx.jsonBody = h('textarea', {id: 'json-body', rows: '12', spellcheck: 'false',
    class: 'code-input'});
  ctx.jsonField = field('Request body (JSON)', ctx.jsonBody, 'Sent as is: POST ' + API +
    '/destinations for a new destination, PATCH ' + API + '/destinations/{id} once saved.');
  ctx.jsonError = errorBox('json-error');
  ctx.jsonFill = h('button', {type: 'button', id: 'json-fill', text: 'Fill from the form'});
  ctx.jsonSend = h('button', {type: 'button', id: 'json-send', text: 'Send JSON'});
  ctx.jsonDetails = h('details', {class: 'advanced card', id: 'json-editor'},
    h('summary', {text: 'Advanced: edit the request as JSON'}), ctx.jsonError.el, ctx.jsonField.wrap,
    h('div', {class: 'actions-inline'}, ctx.jsonFill, ctx.jsonSend));
  append(ctx.view, ctx.jsonDetails);
  ctx.jsonDetails.addEventListener('toggle', function () {
    if (ctx.jsonDetails.open && !ctx.jsonBody.value) fillJson(ctx);
  });
  ctx.jsonFill.addEventListener('click', function () { fillJson(ctx); });
  ctx.jsonSend.addEventListener('click', function () {
    ctx.jsonError.hide();
    var body;
    try {
      body = JSON.parse(ctx.jsonBody.value);
    } catch (e) {
      ctx.jsonError.show('This is not valid JSON', e.message);
      return;
    }
    ctx.jsonSend.disabled = true;
    announce('Sending the JSON request…');
    var call = ctx.editing ? api('PATCH', '/destinations/' + enc(ctx.editing.id), body) :
      api('POST', '/destinations', body);
    call.then(function (saved) {
      ctx.jsonSend.disabled = false;
      announce('Saved destination ' + saved.id + '.', 'ok', true);
      if (location.hash === '#/setup/' + enc(saved.id)) {
        route();
      } else {
        location.hash = '#/setup/' + enc(saved.id);
      }
    }, function (e) {
      ctx.jsonSend.disabled = false;
      if (e.authFailure) return;
      announce('The collector refused the request.', 'error');
      showApiError(ctx.jsonError, e, 'The collector refused the request');
      ctx.jsonError.el.focus();
    });
  });
}

function findType(ctx, t) {
  for (var i = 0; i < ctx.types.length; i++) if (ctx.types[i].type === t) return ctx.types[i];
  return ctx.types[0];
}

function limits(ctx) {
  var t = ctx.chosenType || ctx.types[0];
  return {
    maxUrls: t.maxUrls || 5,
    maxHeaders: t.maxHeadersPerUrl || 5,
    reserved: (t.reservedHeaders || DEFAULT_TYPE.reservedHeaders).map(function (x) {
      return x.toLowerCase();
    })
  };
}

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

function addSourceChoice(ctx, src, checked) {
  var id = 'source-' + src.id;
  var cb = h('input', {type: 'checkbox', id: id, value: src.id, checked: !!checked,
    class: 'source-choice'});
  ctx.sourceBoxes[src.id] = cb;
  append(ctx.sourceList, h('div', {class: 'choice-inline'}, cb,
    h('label', {for: id}, h('span', {text: src.name || src.id}),
      h('span', {class: 'muted', text: ' ' + src.id + ' · ' + (src.kind || '')}))));
  ctx.sourceEmpty.hidden = true;
}

function createSource(ctx) {
  ctx.newSourceError.hide();
  ctx.newNameField.setError('');
  if (!ctx.newName.value.trim()) {
    ctx.newNameField.setError('Enter a name for the source.', 'client');
    ctx.newName.focus();
    return;
  }
  ctx.createBtn.disabled = true;
  announce('Creating the source…');
  api('POST', '/sources', {name: ctx.newName.value.trim(), kind: ctx.newKind.value}).then(function (src) {
    ctx.createBtn.disabled = false;
    addSourceChoice(ctx, src, true);
    ctx.newName.value = '';
    showNewKey(ctx.keyPanel, src, (src.writeKeys || [])[0] || '');
    announce('Created source ' + (src.name || src.id) + ' and selected it.', 'ok');
  }, function (e) {
    ctx.createBtn.disabled = false;
    if (e.authFailure) return;
    var leftover = [];
    (e.violations || []).forEach(function (v) {
      if (v.field === 'name') {
        ctx.newNameField.setError(v.description, 'server');
      } else {
        leftover.push((v.field ? v.field + ': ' : '') + v.description);
      }
    });
    ctx.newSourceError.show('The collector refused the source', e.message + codeSuffix(e), leftover);
  });
}

function fillJson(ctx) {
  ctx.jsonBody.value = JSON.stringify(buildBody(ctx).body, null, 2);
}

function revealSteps(ctx) {
  var show = !!ctx.chosenType;
  [ctx.s2, ctx.s3, ctx.s4, ctx.s5, ctx.s6].forEach(function (s) { s.hidden = !show; });
}

function enterEditMode(ctx, dest) {
  ctx.editing = dest;
  ctx.h1.textContent = 'Edit destination ' + dest.id;
  document.title = 'Edit destination ' + dest.id + ' · hookrelay console';
  ctx.idInput.value = dest.id;
  ctx.idInput.readOnly = true;
  ctx.idField.wrap.querySelector('.field-hint').textContent = 'The id cannot be changed.';
  Array.prototype.forEach.call(ctx.typeFieldset.querySelectorAll('input'), function (r) {
    r.disabled = true;
  });
  ctx.secret.value = '';
  ctx.secret.disabled = false;
  ctx.removeSecret.checked = false;
  ctx.secret.placeholder = dest.sharedSecretSet ? 'unchanged' : 'none';
  ctx.removeSecretWrap.hidden = !dest.sharedSecretSet || !!ctx.readOnlyFile;
  fillSecretRotation(ctx, dest);
  var o = dest.options || {};
  ctx.rateIn.value = o.rateLimitPerSecond ? String(o.rateLimitPerSecond) : '';
  ctx.breakerIn.value = o.circuitBreaker && o.circuitBreaker.failures ?
    String(o.circuitBreaker.failures) : '';
  ctx.protection.open = !!(ctx.rateIn.value || ctx.breakerIn.value);
  fillBatch(ctx, o.batch);
  ctx.orderOn.checked = o.ordering === 'per_user';
  ctx.orderDetails.open = ctx.orderOn.checked;
  fillFilter(ctx, dest.filter);
  ctx.testBtn.disabled = false;
  ctx.testNote.textContent = dest.enabled ? 'The destination is enabled.' :
    'The destination is disabled; the test event is sent anyway.';
  ctx.jsonBody.value = '';
  if (ctx.jsonDetails.open) fillJson(ctx);
}

// The request body: POST (everything) or PATCH (the fields this form edits).
function buildBody(ctx) {
  var body = {};
  ctx.sentRows = [];
  ctx.sentSources = [];
  if (!ctx.editing) {
    var id = ctx.idInput.value.trim();
    if (id) body.id = id;
    body.type = (ctx.chosenType || ctx.types[0]).type;
  }
  Object.keys(ctx.sourceBoxes).forEach(function (id) {
    if (ctx.sourceBoxes[id].checked) ctx.sentSources.push(id);
  });
  body.sources = ctx.sentSources.slice();
  body.enabled = ctx.enabled.input.checked;
  body.urls = [];
  ctx.rows.forEach(function (row) {
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
    ctx.sentRows.push({row: row, headers: sent});
  });
  if (ctx.secret.value && !ctx.removeSecret.checked) {
    body.sharedSecret = ctx.secret.value;
  } else if (ctx.editing && ctx.removeSecret.checked) {
    body.sharedSecret = '';
  }
  // Options are replaced as a whole: start from the stored ones and change only these (rate
  // limit, circuit breaker, batch).
  var had = (ctx.editing && ctx.editing.options) || {};
  var opts = JSON.parse(JSON.stringify(had));
  var rate = ctx.rateIn.value.trim();
  var failures = ctx.breakerIn.value.trim();
  if (rate) opts.rateLimitPerSecond = Number(rate); else delete opts.rateLimitPerSecond;
  if (failures) {
    opts.circuitBreaker = Object.assign({}, opts.circuitBreaker || {},
      {failures: Number(failures)});
  } else {
    delete opts.circuitBreaker;
  }
  var batch = batchBody(ctx);
  if (batch) opts.batch = batch; else delete opts.batch;
  // Unticked: "" as the API reads it back (or left out when it was not there), so an unchanged
  // destination sends no options.
  if (ctx.orderOn.checked) {
    opts.ordering = 'per_user';
  } else if ('ordering' in opts) {
    opts.ordering = '';
  }
  if (JSON.stringify(opts) !== JSON.stringify(had)) body.options = opts;
  // The filter is sent when it differs from the stored one ({} removes it).
  var filter = filterBody(ctx);
  var hadFilter = normalFilter(ctx.editing && ctx.editing.filter);
  if (JSON.stringify(filter) !== JSON.stringify(hadFilter)) body.filter = filter;
  return {body: body};
}

function clearServerErrors(ctx) {
  ctx.formError.hide();
  ctx.typeErr.set('');
  ctx.sourcesErr.set('');
  ctx.urlsErr.set('');
  ctx.idField.setError('');
  ctx.secretField.setError('');
  ctx.secretOverlapField.setError('');
  setError(ctx.enabled.input, ctx.enabledErr, '');
  ctx.rateField.setError('');
  ctx.breakerField.setError('');
  setError(ctx.batchOn, ctx.batchOnErr, '');
  setError(ctx.orderOn, ctx.orderErr, '');
  BATCH_FIELDS.forEach(function (b) { ctx.batchFields[b.key].setError(''); });
  clearFilterErrors(ctx);
  ctx.rows.forEach(function (row) {
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
function place(ctx, v) {
  var f = v.field || '';
  var d = v.description || '';
  var m;
  if (f === 'type') { ctx.typeErr.set(d, 'server'); return true; }
  if (f === 'id') { ctx.idField.setError(d, 'server'); return true; }
  if (f === 'sharedSecret') { ctx.secretField.setError(d, 'server'); return true; }
  if (f === 'enabled') { setError(ctx.enabled.input, ctx.enabledErr, d, 'server'); return true; }
  if (f.indexOf('options.rateLimitPerSecond') === 0) {
    ctx.protection.open = true;
    ctx.rateField.setError(d, 'server');
    return true;
  }
  if (f.indexOf('options.circuitBreaker') === 0) {
    ctx.protection.open = true;
    ctx.breakerField.setError(d, 'server');
    return true;
  }
  if (f.indexOf('options.batch') === 0) {
    ctx.batchDetails.open = true;
    var bf = null;
    BATCH_FIELDS.forEach(function (b) {
      if (f === 'options.batch.' + b.key) bf = ctx.batchFields[b.key];
    });
    if (bf) {
      ctx.batchOn.checked = true;
      ctx.batchFieldsWrap.hidden = false;
      bf.setError(d, 'server');
    } else {
      setError(ctx.batchOn, ctx.batchOnErr, d, 'server');
    }
    return true;
  }
  if (f === 'options.ordering') {
    ctx.orderDetails.open = true;
    setError(ctx.orderOn, ctx.orderErr, d, 'server');
    return true;
  }
  if (placeFilter(ctx, v)) return true;
  if (f === 'sources') { ctx.sourcesErr.set(d, 'server'); return true; }
  if ((m = /^sources\[(\d+)\]/.exec(f))) {
    var sid = ctx.sentSources[Number(m[1])];
    ctx.sourcesErr.set((sid ? '"' + sid + '": ' : '') + d, 'server');
    return true;
  }
  if (f === 'urls') { ctx.urlsErr.set(d, 'server'); return true; }
  if ((m = /^urls\[(\d+)\](.*)$/.exec(f))) {
    var sent = ctx.sentRows[Number(m[1])];
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

function save(ctx) {
  if (ctx.readOnlyFile) return;
  clearServerErrors(ctx);
  if (!ctx.chosenType) {
    ctx.typeErr.set('Choose a destination type.', 'client');
    return;
  }
  var built = buildBody(ctx);
  // The one check that must block: a JSON object cannot carry the same header name twice.
  var dup = false;
  ctx.sentRows.forEach(function (s) {
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
    ctx.formError.show('Check the headers', 'A URL lists the same header name twice.');
    ctx.formError.el.focus();
    return;
  }
  ctx.saveBtn.disabled = true;
  announce('Saving the destination…');
  var rotation = takeRotation(ctx, built.body);
  var call = ctx.editing ? api('PATCH', '/destinations/' + enc(ctx.editing.id), built.body) :
    api('POST', '/destinations', built.body);
  call.then(function (saved) {
    return rotateAfterSave(ctx, saved, rotation);
  }).then(function (saved) {
    ctx.saveBtn.disabled = false;
    var created = !ctx.editing;
    enterEditMode(ctx, saved);
    if (created) history.replaceState(null, '', '#/setup/' + enc(saved.id));
    var ends = rotation ? rotationEnd(saved) : '';
    announce((created ? 'Created' : 'Saved') + ' destination ' + saved.id + ' (' +
      (saved.enabled ? 'enabled' : 'disabled') + ')' + (ends ? '; the previous shared ' +
      'secret also signs until ' + formatTime(ends) : '') + '. Send a test event below.', 'ok');
  }, function (e) {
    ctx.saveBtn.disabled = false;
    if (e.authFailure) return;
    if (e.rotationRefused) {
      showRotationRefused(ctx, e);
      return;
    }
    var unmatched = [];
    (e.violations || []).forEach(function (v) {
      if (!place(ctx, v)) unmatched.push((v.field ? v.field + ': ' : '') + (v.description || ''));
    });
    var placed = e.violations.length - unmatched.length;
    var marked = placed ? (placed === 1 ? 'One field is' : placed + ' fields are') +
      ' marked below.' : '';
    ctx.formError.show('The collector refused the destination',
      unmatched.length || !placed ? e.message + codeSuffix(e) + (marked ? ' ' + marked : '') :
        marked + ' Correct ' + (placed === 1 ? 'it' : 'them') + ' and save again.',
      unmatched);
    announce('The collector refused the destination.', 'error');
    ctx.formError.el.focus();
  });
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
      ['URL', 'Status', 'Latency', 'Error'], rows, {id: 'test-results'}),
    filterVerdict(r));
}
