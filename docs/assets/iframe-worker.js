/* Site search from the file system (site/index.html opened as file://).
 *
 * Material's search runs in a Web Worker, and browsers refuse to start a worker from a file://
 * page. Material's offline plugin (mkdocs.yml) inlines the search index into a script and
 * expects a shim named iframe-worker that it would fetch from the network; this is that shim,
 * local: on file:// only, `Worker` becomes an object that runs the worker's script in a hidden
 * iframe of this page (same thread, same origin) and passes the messages both ways. Served over
 * http(s), the browser's own Worker is used and this does nothing.
 */
(function () {
  "use strict";
  if (location.protocol !== "file:") return;

  function FileWorker(url) {
    url = new URL(String(url), location.href).href;  // (relative to this page)
    var outer = new EventTarget();
    var frame = document.createElement("iframe");
    var queue = [];
    var ready = false;
    frame.style.display = "none";
    (document.body || document.documentElement).appendChild(frame);
    var win = frame.contentWindow;
    var doc = frame.contentDocument;

    function load(src) {
      return new Promise(function (resolve, reject) {
        var script = doc.createElement("script");
        script.src = new URL(src, url).href;
        script.onload = resolve;
        script.onerror = function () { reject(new Error("cannot load " + src)); };
        doc.head.appendChild(script);
      });
    }
    function deliver(data) {
      win.dispatchEvent(new win.MessageEvent("message", { data: data }));
    }
    // The worker's side: its postMessage answers this page, importScripts loads in order.
    win.postMessage = function (data) {
      setTimeout(function () {
        var event = new MessageEvent("message", { data: data });
        outer.dispatchEvent(event);
        if (typeof outer.onmessage === "function") outer.onmessage(event);
      });
    };
    win.importScripts = function () {
      var urls = Array.prototype.slice.call(arguments);
      return urls.reduce(function (done, src) {
        return done.then(function () { return load(src); });
      }, Promise.resolve());
    };
    load(url).then(function () {
      ready = true;
      queue.splice(0).forEach(deliver);
    });
    outer.postMessage = function (data) {
      setTimeout(function () { if (ready) deliver(data); else queue.push(data); });
    };
    outer.terminate = function () { frame.remove(); };
    return outer;
  }

  window.Worker = FileWorker;
})();
