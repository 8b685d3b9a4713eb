// hookrelay console: the deletion requests page. Loaded after core.js.
'use strict';

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
