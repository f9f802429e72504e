// opkit console: keeps a page's live part (#live) current from /live
// (Server-Sent Events). Pages work without it; it only saves reloads.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var pending = null;
  function busy() {
    // Leave the part alone while someone types or chooses in it, and
    // while a form in it holds what they typed and have not sent (the
    // button they press must not be swapped away under them).
    var a = document.activeElement;
    if (a && live.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return true;
    var fields = live.querySelectorAll("textarea, input[type=text], input[type=search]");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) return true;
    }
    return false;
  }
  function swap(html) {
    if (busy()) { pending = html; return; }
    pending = null;
    // Keep open <details> open, and the focused link (or other element
    // with an id, as the diagram) focused, across the swap.
    var open = [];
    live.querySelectorAll("details[open] > summary").forEach(function (s) { open.push(s.textContent); });
    var a = document.activeElement && live.contains(document.activeElement) ? document.activeElement : null;
    var focused = a ? a.getAttribute("href") : null;
    var focusedID = a && !focused ? a.id : "";
    live.innerHTML = html;
    live.querySelectorAll("details > summary").forEach(function (s) {
      if (open.indexOf(s.textContent) >= 0) s.parentElement.open = true;
    });
    if (focused) {
      var again = live.querySelector('[href="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    } else if (focusedID) {
      var same = document.getElementById(focusedID);
      if (same) same.focus();
    }
    live.dispatchEvent(new CustomEvent("opkit:updated"));
  }
  document.addEventListener("focusout", function () {
    if (pending !== null) setTimeout(function () { if (pending !== null) swap(pending); }, 0);
  });
  var source = new EventSource("/live?path=" + encodeURIComponent(live.dataset.live));
  source.addEventListener("live", function (e) { swap(e.data); });
})();
