// hookrelay console: the audiences page. Loaded after core.js.
'use strict';

// ---------------------------------------------------------------------------------------------
// Audiences (SPEC §6.2): the list (membership, last sync, Sync now, Delete after an in-row
// confirmation) and a create form whose rule's conditions are JSON.

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

  // The trait comes from the collector, which derives it from the name
  // (common::AudienceTraitName) and refuses one another audience already sets: a validate_only
  // create, asked 150 ms after the name last changed. Only the name decides the trait, so the
  // probe carries it with a stand-in rule and the first source; the form's own sources and
  // conditions are judged when it is sent. A later answer replaces an earlier one only if it
  // is for the latest name.
  var traitAsked = 0;
  var traitTimer = null;
  function setTrait(t) {
    traitOut.textContent = t || '—';
    traitOut.classList.toggle('muted', !t);
  }
  function showTrait() {
    clearTimeout(traitTimer);
    var seq = ++traitAsked;
    var name = nameIn.value.trim();
    if (nameF.source() === 'preview') nameF.setError('');
    if (!name || !sourceBoxes.length) {
      setTrait('');
      return;
    }
    traitTimer = setTimeout(function () {
      var probe = {name: name, sources: [sourceBoxes[0].value],
        rule: {match: 'all', conditions: [{trait: 'plan', op: 'exists'}]}};
      api('POST', '/audiences?validate_only=true', probe).then(function (a) {
        if (seq !== traitAsked) return;
        setTrait(a.trait);
      }, function (e) {
        if (seq !== traitAsked || e.authFailure) return;
        setTrait('');
        (e.violations || []).forEach(function (v) {
          var f = String(v.field || '').replace(/^audience\./, '');
          if (f === 'name' || f === 'trait') nameF.setError(v.description || '', 'preview');
        });
      });
    }, 150);
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
    showTrait();  // A name typed before the sources came.
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
