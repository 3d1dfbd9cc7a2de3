// Live updates of the approvals page: pending requests appear and leave
// as server-sent events from /ui/events report them. The page works
// without this script (reload to see new requests).
(function () {
  'use strict';
  var list = document.getElementById('pending');
  if (!list || !window.EventSource) { return; }
  var empty = document.getElementById('pending-empty');
  var status = document.getElementById('live-status');
  function say(text) { if (status) { status.textContent = text; } }
  function card(id) { return document.getElementById('approval-' + id); }
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
      if (!keep[el.dataset.id]) { el.remove(); }
    });
    refresh();
  });
  es.addEventListener('pending', function (e) {
    var d = JSON.parse(e.data);
    if (card(d.id)) { return; }
    var t = document.createElement('template');
    t.innerHTML = d.html; // rendered and escaped by the server's html/template
    var el = t.content.firstElementChild;
    if (!el) { return; }
    el.classList.add('new');
    list.prepend(el);
    refresh();
  });
  es.addEventListener('closed', function (e) {
    var el = card(JSON.parse(e.data).id);
    if (el) { el.remove(); }
    refresh();
  });
  window.addEventListener('pagehide', function () { es.close(); });
})();
