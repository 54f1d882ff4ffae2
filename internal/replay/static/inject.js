// waggle: tells the banner frame which capture is shown, and puts a page
// opened on its own back into the banner frame.
(function () {
  var wb = window.__wb;
  if (!wb) { return; }
  if (window === window.top) {
    if (wb.frame) {
      window.location.replace(wb.top + wb.prefix + wb.ts + "/" + wb.url);
    }
    return;
  }
  if (!wb.frame || window.parent !== window.top) { return; }
  function report() {
    window.parent.postMessage({
      waggle: "load", url: wb.url, ts: wb.ts, title: document.title,
      prev: wb.prev || "", next: wb.next || "", count: wb.count
    }, wb.top);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", report);
  } else {
    report();
  }
})();
