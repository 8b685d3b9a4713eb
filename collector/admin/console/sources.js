// hookrelay console: the sources page. Loaded after core.js.
'use strict';

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
