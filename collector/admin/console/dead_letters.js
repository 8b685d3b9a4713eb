// hookrelay console: the dead letters page. Loaded after core.js.
'use strict';

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
