"use strict";
// The login page: JSON posts with the UI header (no HTML form submission).
(function () {
  const err = document.getElementById("login-error");

  async function post(payload) {
    err.textContent = "";
    const r = await fetch("/web/login", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-AI-Memory-UI": "1" },
      body: JSON.stringify(payload),
    });
    if (r.ok) {
      window.location.assign("/web/inbox");
      return;
    }
    let msg = "Login failed";
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    err.textContent = msg;
  }

  document.getElementById("password-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const pw = document.getElementById("password");
    post({ user: document.getElementById("user").value, password: pw.value });
    pw.value = "";
  });
  document.getElementById("key-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const key = document.getElementById("key");
    post({ key: key.value });
    key.value = "";
  });
  fetch("/web/api/me", { credentials: "same-origin" }).then(function (r) {
    return r.ok ? r.json() : null;
  }).then(function (me) {
    if (me && me.anonymous) { document.getElementById("anon-note").hidden = false; }
  }).catch(function () { /* not logged in */ });
}());
