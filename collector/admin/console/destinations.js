// hookrelay console: the destinations page. Loaded after core.js.
'use strict';

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
