// hookrelay console: a new shared secret typed on a destination's edit page, with an overlap
// (SPEC §5.4, secret rotation). Loaded after setup.js, whose step 4 calls setupSecretRotation;
// enterEditMode, buildBody, save and clearServerErrors call the functions below. While a secret
// is in use, a new one goes through POST :rotateSecret with the chosen overlap (24 h unless
// changed), so receivers keep verifying with the previous secret until they are updated; "None"
// replaces it at once, as a PATCH does. The overlap choices are the destinations page's own
// (ROTATION_OVERLAPS, destinations.js).
'use strict';

function setupSecretRotation(ctx) {
  ctx.secretOverlap = h('select', {id: 'secret-overlap'}, ROTATION_OVERLAPS.map(function (o) {
    return h('option', {value: o[0], text: o[1], selected: o[0] === '86400s'});
  }));
  ctx.secretOverlapField = field('With a new secret, the previous one also signs for',
    ctx.secretOverlap,
    'While it does, X-Signature stays signed with the previous secret and webhook-signature ' +
    'carries both, so receivers keep verifying until they are updated.');
  ctx.secretRotationState = h('p', {class: 'rotation-state', id: 'secret-rotation-state'});
  ctx.secretRotationWrap = h('div', {id: 'secret-rotation', hidden: true},
    ctx.secretRotationState, ctx.secretOverlapField.wrap);
  append(ctx.s4, ctx.secretRotationWrap);
}

// The overlap applies to a destination with a secret in use, edited through the API.
function fillSecretRotation(ctx, dest) {
  var rotating = !!dest.sharedSecretSet && !ctx.readOnlyFile;
  ctx.secretRotationWrap.hidden = !rotating;
  ctx.secretOverlap.value = '86400s';
  ctx.secretOverlapField.setError('');
  clear(ctx.secretRotationState);
  var ends = rotationEnd(dest);
  if (rotating && ends) {
    append(ctx.secretRotationState, 'The previous secret also signs until ', timeEl(ends), '.');
  }
}

// Takes a new secret out of the PATCH body when it is to be rotated in; returns the rotation
// request ({sharedSecret, overlap}) or null.
function takeRotation(ctx, body) {
  if (!ctx.editing || ctx.secretRotationWrap.hidden || !body.sharedSecret ||
      ctx.secretOverlap.value === '0s') {
    return null;
  }
  var rotation = {sharedSecret: body.sharedSecret, overlap: ctx.secretOverlap.value};
  delete body.sharedSecret;
  return rotation;
}

// After the PATCH: the rotation, resolving to the destination as stored. A refusal is rejected
// with `rotationRefused` set, its errors put next to the secret and overlap fields.
function rotateAfterSave(ctx, saved, rotation) {
  if (!rotation) return Promise.resolve(saved);
  return api('POST', '/destinations/' + enc(saved.id) + ':rotateSecret', rotation).then(
    null,
    function (e) {
      e.rotationRefused = true;
      e.saved = saved;
      throw e;
    });
}

// The other changes are saved; only the new secret was refused: its errors next to the secret
// and overlap fields, the rest in the form's summary.
function showRotationRefused(ctx, e) {
  enterEditMode(ctx, e.saved);
  var others = [];
  (e.violations || []).forEach(function (v) {
    if (v.field === 'sharedSecret') {
      ctx.secretField.setError(v.description || '', 'server');
    } else if (v.field === 'overlap') {
      ctx.secretOverlapField.setError(v.description || '', 'server');
    } else {
      others.push((v.field ? v.field + ': ' : '') + (v.description || ''));
    }
  });
  ctx.formError.show('Saved, but the collector refused the new shared secret',
    e.message + codeSuffix(e), others);
  announce('Saved destination ' + e.saved.id + ', but the new shared secret was refused.',
    'error');
  ctx.formError.el.focus();
}
