// The job page's live log: follows the running round's server-sent events (the URL is the
// `data-src` of section#live) and appends each chunk as text (never as markup). The browser
// reconnects by itself after a drop, sending the last event id (the bytes it has), and the
// server sends only what follows. `end` closes the stream for good.
"use strict";
(function () {
  var section = document.getElementById("live");
  if (!section || typeof EventSource === "undefined") {
    return;
  }
  var log = document.getElementById("live-log");
  var status = document.getElementById("live-status");
  var src = section.getAttribute("data-src");
  // Only a path of this dashboard is followed.
  if (!src || src.indexOf("/ui/jobs/") !== 0) {
    return;
  }
  function say(text) {
    status.textContent = text;
  }
  function atBottom() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 24;
  }
  var es = new EventSource(src);
  es.addEventListener("open", function () {
    say("live");
  });
  es.addEventListener("log", function (e) {
    var follow = atBottom();
    var text;
    try {
      text = JSON.parse(e.data);
    } catch (err) {
      return;
    }
    if (typeof text !== "string") {
      return;
    }
    log.appendChild(document.createTextNode(text));
    if (follow) {
      log.scrollTop = log.scrollHeight;
    }
    say("live");
  });
  es.addEventListener("end", function () {
    es.close();
    say("ended");
    var next = document.getElementById("live-next");
    if (next) {
      next.hidden = false;
    }
  });
  es.addEventListener("error", function (e) {
    if (e && typeof e.data === "string") {
      // The server's own `error` event: it cannot be followed; stop.
      var why = "";
      try {
        why = JSON.parse(e.data);
      } catch (err) {
        why = "";
      }
      es.close();
      say("ended: " + why);
      return;
    }
    if (es.readyState === EventSource.CLOSED) {
      say("ended");
    } else {
      say("reconnecting");
    }
  });
})();
