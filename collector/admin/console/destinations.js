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
  var rotateSection = h('section', {class: 'card', id: 'rotate-secret', hidden: true,
    'aria-labelledby': 'rotate-secret-title'});
  append(view, rotateSection);

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
    // Rotation needs a secret in use (to overlap with) and an API-managed destination.
    if (!file && d.sharedSecretSet) {
      var rotate = h('button', {type: 'button', class: 'button-small rotate-secret',
        text: 'Rotate secret', 'aria-label': 'Rotate the shared secret of ' + d.id});
      rotate.addEventListener('click', function () { openRotate(d); });
      append(actions, rotate);
    }
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
        d.sharedSecretSet ? h('span', {class: 'tag', text: 'signed'}) : null,
        rotationEnd(d) ? [h('br'), h('small', {class: 'muted rotation-note'},
          'previous secret also signs until ', timeEl(rotationEnd(d)))] : null),
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
  // flight (stats), and the options that bound it (rate limit, breaker settings, batches).
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
    if (opts.ordering === 'per_user') {
      lines.push(h('br'), h('small', {class: 'bounds ordering', text: 'in order per user',
        title: 'Each user\'s events go in the order received, one request per user at a time'}));
    }
    if (opts.batch) {
      lines.push(h('br'), h('small', {class: 'bounds batching', text: 'batches ≤ ' +
        num(opts.batch.maxEvents) + ' / ' + num(opts.batch.maxWaitMs) + ' ms',
        title: 'Batched webhooks: up to ' + num(opts.batch.maxEvents) + ' events and ' +
          num(opts.batch.maxBytes).toLocaleString() + ' bytes per request, sent at most ' +
          num(opts.batch.maxWaitMs) + ' ms after its first event'}));
    }
    return h('td', {class: 'cell-protection'}, lines);
  }

  // The rotation form (POST :rotateSecret) below the list, for one destination.
  function openRotate(d) {
    clear(rotateSection);
    var box = errorBox('rotate-error');
    var state = h('p', {class: 'rotation-state', id: 'rotation-state'});
    var secret = h('input', {type: 'password', id: 'rotate-new-secret', autocomplete: 'new-password',
      spellcheck: 'false'});
    var secretField = field('New shared secret', secret, 'Give it to the receivers first; it is ' +
      'not shown again.');
    var overlap = h('select', {id: 'rotate-overlap'}, ROTATION_OVERLAPS.map(function (o) {
      return h('option', {value: o[0], text: o[1], selected: o[0] === '86400s'});
    }));
    var overlapField = field('Overlap', overlap, 'How long the previous secret also signs.');
    var submit = h('button', {type: 'submit', class: 'button-primary', id: 'rotate-submit',
      text: 'Rotate secret'});
    var cancel = h('button', {type: 'button', id: 'rotate-cancel', text: 'Close'});
    var form = h('form', {id: 'rotate-form', novalidate: true},
      h('div', {class: 'field-row'}, secretField.wrap, overlapField.wrap),
      h('div', {class: 'actions-inline'}, submit, cancel));
    showRotationState(state, d);
    append(rotateSection, h('h2', {id: 'rotate-secret-title', tabindex: '-1',
      text: 'Rotate the shared secret of ' + d.id}), state,
      h('p', {class: 'lead', text: 'During the overlap X-Signature is still made with the ' +
        'previous secret and webhook-signature carries both signatures, so receivers can switch ' +
        'without refusing requests; after it the new secret alone signs.'}),
      box.el, form);
    rotateSection.hidden = false;
    rotateSection.scrollIntoView({block: 'nearest'});
    rotateSection.querySelector('h2').focus();

    cancel.addEventListener('click', function () {
      clear(rotateSection);
      rotateSection.hidden = true;
    });
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      box.hide();
      secretField.setError('');
      overlapField.setError('');
      if (!secret.value) {
        secretField.setError('Enter the new secret.', 'client');
        secret.focus();
        return;
      }
      submit.disabled = true;
      announce('Rotating the shared secret of ' + d.id + '…');
      api('POST', '/destinations/' + enc(d.id) + ':rotateSecret',
        {sharedSecret: secret.value, overlap: overlap.value}).then(function (saved) {
        submit.disabled = false;
        secret.value = '';
        showRotationState(state, saved);
        var ends = rotationEnd(saved);
        announce('Rotated the shared secret of ' + d.id + (ends ? '; the previous secret also ' +
          'signs until ' + formatTime(ends) : '; the new secret alone signs now') + '.', 'ok');
        load();
      }, function (e) {
        submit.disabled = false;
        if (e.authFailure) return;
        var unmatched = [];
        (e.violations || []).forEach(function (v) {
          if (v.field === 'sharedSecret') {
            secretField.setError(v.description || '', 'server');
          } else if (v.field === 'overlap') {
            overlapField.setError(v.description || '', 'server');
          } else {
            unmatched.push((v.field ? v.field + ': ' : '') + (v.description || ''));
          }
        });
        box.show('The collector refused the rotation', e.message + codeSuffix(e), unmatched);
        announce('Could not rotate the shared secret of ' + d.id + '.', 'error');
        box.el.focus();
      });
    });
  }

  load();
}

// The overlap choices of a rotation (protobuf Duration JSON, label); 24 h is the API's default.
var ROTATION_OVERLAPS = [
  ['3600s', '1 hour'],
  ['86400s', '24 hours'],
  ['604800s', '7 days'],
  ['2592000s', '30 days (the most)'],
  ['0s', 'None: the new secret alone signs now']
];

// The end of a destination's secret rotation (its overlap), or '' when none lasts.
function rotationEnd(d) {
  return (d && d.rotation && d.rotation.endsAt) || '';
}

function showRotationState(el, d) {
  clear(el);
  var ends = rotationEnd(d);
  append(el, h('strong', {text: 'Shared secret: '}), d.sharedSecretSet ? 'set' : 'none',
    ends ? [' — the previous secret also signs until ', timeEl(ends)] : null);
}
