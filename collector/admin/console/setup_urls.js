// hookrelay console: the setup form's receiver URLs (step 3), each with its header rows, their
// limits from the catalog and the hints shown on blur. Loaded after core.js; used by setup.js.
'use strict';

// Step 3: URLs with their headers.
function setupUrlsStep(ctx) {
  ctx.s3 = step(3, 'Receiver URLs', 'Each event is POSTed as JSON to these URLs. Add static ' +
    'headers (for example an API key) per URL.');
  ctx.urlRowsEl = h('div', {class: 'url-rows', id: 'url-rows'});
  ctx.urlsErr = groupError();
  ctx.addUrlBtn = h('button', {type: 'button', id: 'add-url', text: 'Add URL'});
  ctx.urlLimitNote = h('p', {class: 'limit-note', id: 'url-limit-note', hidden: true});
  ctx.addUrlBtn.setAttribute('aria-describedby', ctx.urlLimitNote.id);
  append(ctx.s3, ctx.urlRowsEl, ctx.urlsErr.el, h('div', {class: 'actions-inline'}, ctx.addUrlBtn, ctx.urlLimitNote));
  append(ctx.form, ctx.s3);
  ctx.rows = [];

  ctx.addUrlBtn.addEventListener('click', function () {
    if (ctx.rows.length >= limits(ctx).maxUrls) return;
    var row = makeRow(ctx, null);
    renumber(ctx);
    row.urlInput.focus();
    announce('Added URL ' + ctx.rows.length + '.');
  });

  ctx.initialUrls = ctx.existing && ctx.existing.urls && ctx.existing.urls.length ? ctx.existing.urls : [null];
  ctx.initialUrls.forEach(function (u) { makeRow(ctx, u); });
  renumber(ctx);
}

function makeRow(ctx, entry) {
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
  row.urlInput.addEventListener('blur', function () { afterPointer(function () { checkUrl(ctx, row); }); });
  row.addHeaderBtn.addEventListener('click', function () {
    if (row.headers.length >= limits(ctx).maxHeaders) return;
    var hr = addHeader(ctx, row, null);
    renumber(ctx);
    hr.nameInput.focus();
  });
  row.removeBtn.addEventListener('click', function () {
    var i = ctx.rows.indexOf(row);
    if (i < 0 || ctx.rows.length <= 1) return;
    ctx.rows.splice(i, 1);
    row.el.remove();
    renumber(ctx);
    (ctx.rows[Math.min(i, ctx.rows.length - 1)].urlInput).focus();
    announce('Removed URL ' + (i + 1) + '.');
  });
  var headers = entry && entry.headers ? entry.headers : {};
  Object.keys(headers).forEach(function (name) {
    addHeader(ctx, row, {name: name, value: headers[name]});
  });
  ctx.rows.push(row);
  append(ctx.urlRowsEl, row.el);
  return row;
}

function addHeader(ctx, row, entry) {
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
    afterPointer(function () { checkHeaders(ctx, row); });
  });
  hr.removeBtn.addEventListener('click', function () {
    var i = row.headers.indexOf(hr);
    row.headers.splice(i, 1);
    hr.el.remove();
    renumber(ctx);
    row.addHeaderBtn.focus();
    checkHeaders(ctx, row);
  });
  row.headers.push(hr);
  append(row.headersEl, hr.el);
  return hr;
}

// Positions, labels for assistive technology, and the limit buttons.
function renumber(ctx) {
  var lim = limits(ctx);
  ctx.rows.forEach(function (row, i) {
    row.el.dataset.urlIndex = String(i);
    row.legend.textContent = 'URL ' + (i + 1);
    row.urlInput.setAttribute('aria-label', 'URL ' + (i + 1));
    row.removeBtn.hidden = ctx.rows.length <= 1;
    row.removeBtn.setAttribute('aria-label', 'Remove URL ' + (i + 1));
    row.headers.forEach(function (hr, j) {
      hr.el.dataset.headerIndex = String(j);
      hr.nameInput.setAttribute('aria-label', 'Header ' + (j + 1) + ' name, URL ' + (i + 1));
      hr.valueInput.setAttribute('aria-label', 'Header ' + (j + 1) + ' value, URL ' + (i + 1));
      hr.removeBtn.setAttribute('aria-label', 'Remove header ' + (j + 1) + ' of URL ' + (i + 1));
    });
    var fullH = row.headers.length >= lim.maxHeaders;
    row.addHeaderBtn.disabled = fullH || !!ctx.readOnlyFile;
    row.addHeaderBtn.setAttribute('aria-label', 'Add header to URL ' + (i + 1));
    row.headerNote.hidden = !fullH;
    row.headerNote.textContent = 'at most ' + lim.maxHeaders + ' headers per URL';
  });
  var full = ctx.rows.length >= lim.maxUrls;
  ctx.addUrlBtn.disabled = full || !!ctx.readOnlyFile;
  ctx.urlLimitNote.hidden = !full;
  ctx.urlLimitNote.textContent = 'at most ' + lim.maxUrls + ' URLs';
}

function updateLimits(ctx) { renumber(ctx); }

// Client-side checks: hints on blur only; they never block Save (the collector decides).
function checkUrl(ctx, row) {
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

function checkHeaders(ctx, row) {
  var lim = limits(ctx);
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
