// Live updates: pending approvals appear and leave as server-sent events
// from /ui/events report them; an element with data-refresh (the journal
// with auto-refresh on, the upstreams page) is read again every so many
// milliseconds. Every page works without this script (reload to update).
(function () {
  'use strict';
  var status = document.getElementById('live-status');
  function say(text) { if (status) { status.textContent = text; } }

  // ---- elements that refresh themselves
  document.querySelectorAll('[data-refresh]').forEach(function (el) {
    var every = parseInt(el.dataset.refresh, 10);
    if (!el.id || !(every >= 1000) || !window.fetch || !window.DOMParser) { return; }
    say('live');
    setInterval(function () {
      if (document.hidden) { return; }
      fetch(location.href, { headers: { 'Accept': 'text/html' }, credentials: 'same-origin' })
        .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById(el.id);
          if (fresh) { el.innerHTML = fresh.innerHTML; say('live'); }
        })
        .catch(function () { say('reconnecting'); });
    }, every);
  });

  // ---- pending approvals
  var list = document.getElementById('pending');
  if (!list || !window.EventSource) { return; }
  var empty = document.getElementById('pending-empty');
  // A request's element: its line (which holds its card), or its card.
  function item(id) { return document.getElementById('item-' + id) || document.getElementById('approval-' + id); }
  function refresh() {
    if (empty) { empty.hidden = list.querySelector('article.approval') !== null; }
  }
  var es = new EventSource(list.dataset.events);
  es.addEventListener('open', function () { say('live'); });
  es.addEventListener('error', function () { say('reconnecting'); });
  es.addEventListener('snapshot', function (e) {
    var keep = {};
    JSON.parse(e.data).ids.forEach(function (id) { keep[id] = true; });
    list.querySelectorAll('article.approval').forEach(function (el) {
      if (!keep[el.dataset.id]) { (el.closest('details') || el).remove(); }
    });
    refresh();
  });
  es.addEventListener('pending', function (e) {
    var d = JSON.parse(e.data);
    if (item(d.id)) { return; }
    var t = document.createElement('template');
    t.innerHTML = d.html; // rendered and escaped by the server's html/template
    var el = t.content.firstElementChild;
    if (!el) { return; }
    el.classList.add('new');
    list.prepend(el);
    refresh();
  });
  es.addEventListener('closed', function (e) {
    var el = item(JSON.parse(e.data).id);
    if (el) { el.remove(); }
    refresh();
  });
  window.addEventListener('pagehide', function () { es.close(); });
})();
