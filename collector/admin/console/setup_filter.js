// hookrelay console: the destination form's filter (SPEC §5.4). Loaded after setup.js, whose
// step 5 calls setupFilter; buildBody, enterEditMode, clearServerErrors and place call the
// functions below. Every check of the values is the collector's (one validator for the file and
// the API): the form only shapes the JSON and puts the answer's errors next to the fields.
'use strict';

var FILTER_TYPES = ['track', 'identify', 'page', 'screen', 'group', 'alias'];
var FILTER_OPS = ['eq', 'neq', 'in', 'exists', 'gt', 'gte', 'lt', 'lte', 'contains'];

function setupFilter(ctx) {
  ctx.filterRows = [];
  ctx.filterTypeBoxes = {};
  var typeList = h('div', {class: 'choice-row', id: 'filter-types'});
  FILTER_TYPES.forEach(function (t) {
    var box = h('input', {type: 'checkbox', id: 'filter-type-' + t, value: t});
    ctx.filterTypeBoxes[t] = box;
    append(typeList, h('label', {class: 'choice-inline', for: box.id}, box, ' ' + t));
  });
  ctx.filterTypesErr = groupError();
  var typesSet = h('fieldset', {class: 'filter-types'}, h('legend', {text: 'Types'}),
    h('p', {class: 'field-hint', text: 'None ticked: every type.'}), typeList,
    ctx.filterTypesErr.el);

  ctx.filterEvents = h('textarea', {id: 'filter-events', rows: '3', spellcheck: 'false',
    placeholder: 'Order *\nSigned Up'});
  ctx.filterEventsField = field('Track event names, one per line', ctx.filterEvents,
    'Exact names, or a prefix ending in * ("Order *"). Empty: every event. When set, only ' +
    'track events pass.');

  ctx.filterWhereList = h('div', {class: 'filter-where', id: 'filter-where'});
  ctx.filterWhereErr = groupError();
  var add = h('button', {type: 'button', class: 'button-small', id: 'filter-add-condition',
    text: 'Add condition'});
  add.addEventListener('click', function () {
    var row = addFilterRow(ctx, {});
    row.path.focus();
  });
  var whereSet = h('fieldset', {class: 'filter-where-set'}, h('legend', {text: 'Conditions'}),
    h('p', {class: 'field-hint', text: 'All must hold. Path: under properties, traits or ' +
      'context (properties.plan, context.app.version), or event, name, category, userId, ' +
      'anonymousId, groupId, previousId. Value: text, a number, true or false; for "in" a ' +
      'list separated by commas; none for "exists".'}),
    ctx.filterWhereList, ctx.filterWhereErr.el, h('div', {class: 'actions-inline'}, add));

  ctx.filterErr = groupError();
  ctx.filterDetails = h('details', {class: 'filter', id: 'filter-options'},
    h('summary', {text: 'Filter (optional): which events reach this destination'}),
    ctx.filterErr.el, typesSet, ctx.filterEventsField.wrap, whereSet);
}

// One condition row: path, op and value, each labelled, and a Remove button.
function addFilterRow(ctx, c) {
  var n = ctx.filterRows.length;
  var path = h('input', {type: 'text', class: 'filter-path', spellcheck: 'false',
    autocomplete: 'off', placeholder: 'properties.plan', value: c.path || ''});
  var op = h('select', {class: 'filter-op'}, FILTER_OPS.map(function (o) {
    return h('option', {value: o, text: o, selected: (c.op || 'eq') === o});
  }));
  var value = h('input', {type: 'text', class: 'filter-value', spellcheck: 'false',
    autocomplete: 'off', placeholder: 'pro', value: valueText(c.value)});
  var pathField = field('Path', path);
  var opField = field('Op', op);
  var valueField = field('Value', value);
  var remove = h('button', {type: 'button', class: 'button-small filter-remove', text: 'Remove',
    'aria-label': 'Remove condition ' + (n + 1)});
  var wrap = h('div', {class: 'filter-row', dataset: {index: String(n)}},
    pathField.wrap, opField.wrap, valueField.wrap, remove);
  var row = {wrap: wrap, path: path, op: op, value: value, pathField: pathField,
    opField: opField, valueField: valueField};
  remove.addEventListener('click', function () {
    ctx.filterRows.splice(ctx.filterRows.indexOf(row), 1);
    wrap.remove();
  });
  ctx.filterRows.push(row);
  append(ctx.filterWhereList, wrap);
  return row;
}

// A condition value as the text box shows it: "pro", 10, true, "pro, team" for a list.
function valueText(v) {
  if (v === undefined || v === null) return '';
  if (Array.isArray(v)) return v.map(valueText).join(', ');
  return String(v);
}

// The text box's value as JSON: numbers and true/false become typed, anything else a string
// (quote it, "2", to keep digits a string).
function parseValue(text) {
  var t = text.trim();
  if (t === 'true') return true;
  if (t === 'false') return false;
  if (t !== '' && /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) return Number(t);
  if (t.length >= 2 && t.charAt(0) === '"' && t.charAt(t.length - 1) === '"') {
    return t.slice(1, -1);
  }
  return t;
}

// The form's filter as the API's JSON: {types, events, where}; {} lets every event through.
function filterBody(ctx) {
  var f = {};
  var types = FILTER_TYPES.filter(function (t) { return ctx.filterTypeBoxes[t].checked; });
  if (types.length) f.types = types;
  var events = ctx.filterEvents.value.split('\n').map(function (s) { return s.trim(); })
    .filter(function (s) { return s; });
  if (events.length) f.events = events;
  var where = ctx.filterRows.map(function (row) {
    var c = {path: row.path.value.trim(), op: row.op.value};
    var raw = row.value.value;
    if (c.op === 'in') {
      c.value = raw.split(',').map(function (s) { return parseValue(s); })
        .filter(function (v) { return v !== ''; });
    } else if (c.op !== 'exists' || raw.trim()) {
      c.value = parseValue(raw);
    }
    return c;
  });
  if (where.length) f.where = where;
  return f;
}

// The stored filter in a comparable form (the API prints empty lists).
function normalFilter(f) {
  f = f || {};
  var out = {};
  if (f.types && f.types.length) out.types = f.types;
  if (f.events && f.events.length) out.events = f.events;
  if (f.where && f.where.length) out.where = f.where;
  return out;
}

function fillFilter(ctx, f) {
  f = normalFilter(f);
  FILTER_TYPES.forEach(function (t) {
    ctx.filterTypeBoxes[t].checked = (f.types || []).indexOf(t) >= 0;
  });
  ctx.filterEvents.value = (f.events || []).join('\n');
  ctx.filterRows.slice().forEach(function (row) { row.wrap.remove(); });
  ctx.filterRows = [];
  (f.where || []).forEach(function (c) { addFilterRow(ctx, c); });
  ctx.filterDetails.open = !!(f.types || f.events || f.where);
}

function clearFilterErrors(ctx) {
  ctx.filterErr.set('');
  ctx.filterTypesErr.set('');
  ctx.filterEventsField.setError('');
  ctx.filterWhereErr.set('');
  ctx.filterRows.forEach(function (row) {
    row.pathField.setError('');
    row.opField.setError('');
    row.valueField.setError('');
  });
}

// A violation of filter.…: next to the field it names. False when it is not the filter's.
function placeFilter(ctx, v) {
  var f = v.field || '';
  var d = v.description || '';
  var m;
  if (f.indexOf('filter') !== 0) return false;
  ctx.filterDetails.open = true;
  if (f.indexOf('filter.types') === 0) { ctx.filterTypesErr.set(d, 'server'); return true; }
  if (f.indexOf('filter.events') === 0) {
    m = /^filter\.events\[(\d+)\]/.exec(f);
    ctx.filterEventsField.setError((m ? 'line ' + (Number(m[1]) + 1) + ': ' : '') + d, 'server');
    return true;
  }
  if ((m = /^filter\.where\[(\d+)\]\.(path|op|value)/.exec(f))) {
    var row = ctx.filterRows[Number(m[1])];
    if (row) {
      (m[2] === 'path' ? row.pathField : m[2] === 'op' ? row.opField : row.valueField)
        .setError(d, 'server');
      return true;
    }
  }
  if (f.indexOf('filter.where') === 0) { ctx.filterWhereErr.set(d, 'server'); return true; }
  ctx.filterErr.set(d, 'server');
  return true;
}

// The test's verdict on the sample event, under the receivers' answers.
function filterVerdict(r) {
  var fr = r.filter || {};
  if (fr.passed) {
    return h('p', {class: 'test-filter', id: 'test-filter'}, 'Filter: ',
      h('span', {class: 'badge badge-ok', text: 'passes'}),
      ' an event like the sample makes a job for this destination.');
  }
  return h('p', {class: 'test-filter', id: 'test-filter'}, 'Filter: ',
    h('span', {class: 'badge badge-warn', text: 'refused by ' + (fr.failed || 'the filter')}),
    ' ' + (fr.reason || '') + '. The sample was sent anyway, as a test; a real event like it ' +
    'makes no job.');
}
