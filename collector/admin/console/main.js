// hookrelay console: the login page, routing and start (straight in when the collector needs no
// token); loaded last, after core.js and the pages.
'use strict';

// ---------------------------------------------------------------------------------------------
// Router

var views = {
  login: viewLogin,
  setup: viewSetup,
  sources: viewSources,
  destinations: viewDestinations,
  'dead-letters': viewDeadLetters,
  deletions: viewDeletions,
  audiences: viewAudiences
};
var titles = {
  login: 'Sign in', setup: 'Set up a destination', sources: 'Sources',
  destinations: 'Destinations', 'dead-letters': 'Dead letters', deletions: 'Deletion requests',
  audiences: 'Audiences'
};
var firstRender = true;

function route() {
  var m = /^#\/([a-z-]+)(?:\/(.*))?$/.exec(location.hash || '');
  var name = m ? m[1] : '';
  var arg = m && m[2] ? decodeURIComponent(m[2]) : '';
  if (!views[name]) {
    location.replace(signedIn() ? '#/setup' : '#/login');
    return;
  }
  if (name !== 'login' && !signedIn()) {
    pendingRoute = location.hash;
    location.replace('#/login');
    return;
  }
  var nav = document.getElementById('nav');
  nav.hidden = !signedIn();
  // Signed in without a token (a collector without one): there is no session to end.
  document.getElementById('sign-out').hidden = !signedIn() || !sessionStorage.getItem(TOKEN_KEY);
  Array.prototype.forEach.call(nav.querySelectorAll('a'), function (a) {
    if (a.dataset.route === name) {
      a.setAttribute('aria-current', 'page');
    } else {
      a.removeAttribute('aria-current');
    }
  });
  document.title = (name === 'setup' && arg ? 'Edit destination ' + arg : titles[name]) +
    ' · hookrelay console';
  // A message belongs to the page it was said on, unless it announced this navigation.
  if (!carryStatus) announce('');
  carryStatus = false;
  var main = document.getElementById('main');
  var view = h('div', {class: 'view view-' + name});
  clear(main);
  main.appendChild(view);
  views[name](view, arg);
  if (!firstRender) {
    var h1 = view.querySelector('h1');
    if (h1) h1.focus();
  }
  firstRender = false;
}

// ---------------------------------------------------------------------------------------------
// Login

function viewLogin(view) {
  var box = errorBox('login-error');
  var token = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off',
    spellcheck: 'false'});
  var tokenField = field('Admin token', token,
    'The token in the collector\'s --admin_token_file. Leave it empty when the collector runs ' +
    'without a token (it then answers on loopback only). Kept in this tab only.');
  var submit = h('button', {type: 'submit', class: 'button-primary', id: 'sign-in',
    text: 'Sign in'});
  var form = h('form', {class: 'card narrow', novalidate: true, 'aria-labelledby': 'login-title'},
    h('h1', {id: 'login-title', tabindex: '-1', class: 'page-title', text: 'Sign in'}),
    h('p', {class: 'lead', text: 'Manage the sources and webhook destinations of this collector.'}),
    box.el, tokenField.wrap, h('div', {class: 'actions'}, submit));
  if (loginMessage) {
    box.show(loginTitle || 'Signed out', loginMessage, null, loginInfo);
    loginMessage = '';
    loginTitle = '';
  }
  form.addEventListener('submit', function (ev) {
    ev.preventDefault();
    box.hide();
    submit.disabled = true;
    sessionStorage.setItem(TOKEN_KEY, token.value.trim());
    catalogPromise = null;
    api('GET', '/catalog', undefined, {noSignOut: true}).then(function () {
      var next = pendingRoute && pendingRoute !== '#/login' ? pendingRoute : '#/setup';
      pendingRoute = '';
      announce('Signed in.', 'ok', true);
      location.hash = next;
    }, function (e) {
      sessionStorage.removeItem(TOKEN_KEY);
      submit.disabled = false;
      var title = e.status === 401 ? 'The collector refused this token' :
        e.status === 403 ? 'The collector refused this client' : 'Could not sign in';
      box.show(title, e.message + codeSuffix(e));
      box.el.focus();
    });
  });
  append(view, form);
  token.focus();
}

// ---------------------------------------------------------------------------------------------
// Start

document.getElementById('sign-out').addEventListener('click', function () {
  signOut('Sign in again to go on.', 'You signed out');
  pendingRoute = '';
});
document.getElementById('skip-link').addEventListener('click', function (ev) {
  ev.preventDefault();
  document.getElementById('main').focus();
});
window.addEventListener('hashchange', route);

// A collector run without an admin token answers its API on loopback without one: there is
// nothing to sign in with, so the console goes straight in, signed in with an empty token (sent as
// no Authorization header). One call without a token tells: 200 → in, on the page asked for;
// 401/403 (a token is required) or no answer → the sign-in form as before.
function start() {
  if (signedIn()) {
    route();
    return;
  }
  api('GET', '/catalog', undefined, {noSignOut: true}).then(function () {
    sessionStorage.setItem(TOKEN_KEY, '');
    if (location.hash === '#/login') {
      location.replace(pendingRoute && pendingRoute !== '#/login' ? pendingRoute : '#/setup');
      pendingRoute = '';
    } else {
      route();
    }
  }, function () {
    route();
  });
}
start();
