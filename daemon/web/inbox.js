"use strict";
// The web inbox. Vanilla JS, no dependencies. Every text from the server is
// put in the page with textContent (never as HTML), so a body such as
// "<script>...</script>" shows as those characters.
(function () {
  const $ = (id) => document.getElementById(id);
  const STATE_WORDS = { pending: "queued", claimed: "collected", cancelled: "cancelled",
                        editing: "Editing", awaiting_approval: "awaiting approval",
                        rejected: "rejected" };
  const ui = { me: null, projects: [], current: null, box: "received", page: 0,
               expanded: new Set(), editing: new Set(), rows: [], thread: null,
               replyTo: null };
  // How a claimed message ended, once its holder completed it.
  const RESULT_WORDS = { done: "done", blocked: "blocked", rejected: "rejected" };

  function stateWord(m) {
    const word = STATE_WORDS[m.state] || m.state;
    const result = m.completion && RESULT_WORDS[m.completion.result];
    return result ? word + " → " + result : word;
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) { e.setAttribute(k, v); }
    }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  async function api(path) {
    const r = await fetch(path, { credentials: "same-origin" });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) { throw new Error(data.error || ("HTTP " + r.status)); }
    return data;
  }

  async function post(path, payload, extraHeaders) {
    const headers = { "Content-Type": "application/json", "X-AI-Memory-UI": "1" };
    if (ui.me && ui.me.csrf_token) { headers["X-CSRF-Token"] = ui.me.csrf_token; }
    Object.assign(headers, extraHeaders || {});
    const r = await fetch(path, { method: "POST", credentials: "same-origin", headers: headers,
                                  body: JSON.stringify(payload || {}) });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = new Error(data.error || ("HTTP " + r.status));
      e.status = r.status;
      e.data = data;
      throw e;
    }
    return data;
  }

  const key = (p) => p.workspace + "/" + p.project;
  const SNIPPET_CHARS = 160;

  // The first 160 characters of a body, on one line (whitespace runs become
  // one space), with an ellipsis when there is more. Counted in characters,
  // not UTF-16 units, so a cut never splits an emoji.
  function snippet(body) {
    const chars = Array.from(String(body || "").replace(/\s+/g, " ").trim());
    return chars.length > SNIPPET_CHARS ? chars.slice(0, SNIPPET_CHARS).join("") + "\u2026"
                                        : chars.join("");
  }
  const projectName = (ws, proj, hidden) => hidden ? null : ws + "/" + proj;

  function nameCell(text) {
    const td = el("td");
    if (text === null) { td.append(el("span", { class: "hidden-name" }, "(a project you cannot read)")); }
    else { td.textContent = text; }
    return td;
  }

  // -- sidebar ---------------------------------------------------------------
  function renderSidebar() {
    const nav = $("sidebar");
    nav.replaceChildren();
    const byWs = new Map();
    for (const p of ui.projects) {
      if (!byWs.has(p.workspace)) { byWs.set(p.workspace, []); }
      byWs.get(p.workspace).push(p);
    }
    if (!ui.projects.length) {
      nav.append(el("p", {}, "No projects you may read yet. A project appears once an agent " +
                              "starts a session in it."));
    }
    for (const [ws, list] of byWs) {
      const h = el("h2", { id: "ws-" + ws }, ws);
      const ul = el("ul", { "aria-labelledby": "ws-" + ws });
      for (const p of list) {
        const li = el("li");
        const a = el("a", { href: "#" + key(p), "data-project": key(p) }, p.project);
        if (ui.current && key(ui.current) === key(p)) { a.setAttribute("aria-current", "page"); }
        a.addEventListener("click", (ev) => { ev.preventDefault(); select(p); });
        li.append(a);
        if (p.writable) {
          const b = el("button", { type: "button", "data-project": key(p),
                                   "aria-label": "Message" }, "Message");
          b.addEventListener("click", () => openComposer(p));
          li.append(b);
        }
        ul.append(li);
      }
      nav.append(h, ul);
    }
  }

  async function select(p) {
    ui.current = p;
    ui.thread = null;
    ui.page = 0;
    ui.expanded.clear();
    window.location.hash = key(p);
    renderSidebar();
    renderAgents();
    await refresh();
  }

  // -- agent cards -----------------------------------------------------------
  // One card per agent (harness) with a session in the selected project; its
  // Message button opens the composer addressed to that project and agent.
  function renderAgents() {
    const box = $("agents");
    box.replaceChildren();
    const p = ui.current;
    if (!p) { box.hidden = true; return; }
    box.hidden = false;
    box.append(el("h3", { id: "agents-title" }, "Agents in " + key(p)));
    const list = el("div", { class: "cards" });
    for (const h of p.harnesses || []) {
      const card = el("article", { class: "agent-card", "data-agent": h,
                                   "aria-label": "Agent " + h });
      card.append(el("h4", {}, h), el("p", { class: "muted" }, key(p)));
      const b = el("button", { type: "button", class: "primary" }, "Message");
      if (p.writable && writable().length) {
        b.addEventListener("click", () => openComposer(p, h));
      } else {
        b.disabled = true;
        card.append(el("p", { class: "explain" }, "You may read this project but not send to it."));
      }
      card.append(b);
      list.append(card);
    }
    if (!(p.harnesses || []).length) {
      list.append(el("p", {}, "No agent has a session in this project yet."));
    }
    box.append(list);
  }

  // -- history ---------------------------------------------------------------
  async function refresh() {
    if (!ui.current) { return; }
    const p = ui.current;
    $("project-title").textContent = key(p) + " · " + (ui.box === "received" ? "Received" : "Sent");
    $("tab-received").setAttribute("aria-selected", String(ui.box === "received"));
    $("tab-sent").setAttribute("aria-selected", String(ui.box === "sent"));
    $("list-error").textContent = "";
    try {
      const q = "workspace=" + encodeURIComponent(p.workspace) + "&project=" +
                encodeURIComponent(p.project);
      const thread = ui.thread ? "&thread_id=" + encodeURIComponent(ui.thread) : "";
      renderThread();
      const [hist, held, waiting] = await Promise.all([
        api("/web/api/history?box=" + ui.box + "&page=" + ui.page + "&" + q + thread),
        api("/web/api/held?" + q), api("/web/api/approvals?" + q)]);
      ui.rows = hist.messages;
      renderRows(hist.messages);
      renderHeld(held);
      renderWaiting(waiting);
      $("prev").disabled = !hist.has_previous;
      $("next").disabled = !hist.has_next;
      $("page-label").textContent = "Page " + (hist.page + 1);
    } catch (e) {
      $("list-error").textContent = e.message;
    }
  }

  function renderThread() {
    const b = $("thread-banner");
    b.replaceChildren();
    if (!ui.thread) { b.hidden = true; return; }
    b.hidden = false;
    const all = el("button", { type: "button" }, "Show all messages");
    all.addEventListener("click", () => { ui.thread = null; ui.page = 0; refresh(); });
    b.append(el("span", {}, "Showing thread " + ui.thread + " "), all);
  }

  function renderHeld(held) {
    const b = $("held-banner");
    b.replaceChildren();
    if (!held.count) { b.hidden = true; return; }
    b.hidden = false;
    b.append(el("span", {}, held.count === 1 ? "1 message is held for editing: "
                                             : held.count + " messages are held for editing: "));
    held.messages.forEach((m, i) => {
      if (i) { b.append(", "); }
      const a = el("a", { href: "#msg-" + m.id }, m.subject || m.id);
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        showHeld(m);
      });
      b.append(a);
    });
  }

  // Mail an admission policy held for an approver: counted above the list,
  // each linked to its row (where Approve and Reject are).
  function renderWaiting(waiting) {
    const b = $("approval-banner");
    b.replaceChildren();
    if (!waiting.count) { b.hidden = true; return; }
    b.hidden = false;
    b.append(el("span", {}, waiting.count === 1 ? "1 message awaits approval: "
                                                : waiting.count + " messages await approval: "));
    waiting.messages.forEach((m, i) => {
      if (i) { b.append(", "); }
      const a = el("a", { href: "#msg-" + m.id }, m.subject || m.id);
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        showHeld(m);
      });
      b.append(a);
    });
  }

  async function showHeld(m) {
    // A held message may be on another page: show it in the Received view.
    if (ui.box !== "received") { ui.box = "received"; ui.page = 0; }
    ui.expanded.add(m.id);
    await refresh();
    if (!ui.rows.some((r) => r.id === m.id)) { ui.rows.unshift(m); renderRows(ui.rows); }
    const row = document.getElementById("msg-" + m.id);
    if (row) { row.scrollIntoView(); }
  }

  function renderRows(rows) {
    const body = $("rows");
    body.replaceChildren();
    if (!rows.length) {
      const tr = el("tr");
      tr.append(el("td", { colspan: "6" }, "No messages."));
      body.append(tr);
    }
    for (const m of rows) {
      const tr = el("tr", { id: "msg-" + m.id, "data-id": m.id });
      const subj = el("td");
      const open = ui.expanded.has(m.id);
      const toggle = el("button", { type: "button", "aria-expanded": String(open),
                                    "aria-controls": "detail-" + m.id },
                        m.subject || "(no subject)");
      toggle.addEventListener("click", () => {
        if (ui.expanded.has(m.id)) { ui.expanded.delete(m.id); } else { ui.expanded.add(m.id); }
        renderRows(ui.rows);
      });
      subj.append(toggle);
      const word = stateWord(m);
      const result = m.completion && RESULT_WORDS[m.completion.result];
      const state = el("td");
      // A completed message's class names its outcome (outcome-done,
      // outcome-blocked, outcome-rejected); otherwise its state
      // (state-rejected is the approval queue's rejected message).
      const cls = result ? "outcome-" + result
                         : "state-" + word.toLowerCase().replace(/ /g, "-");
      state.append(el("span", { class: "state " + cls }, word));
      tr.append(subj,
        el("td", { class: "snippet" }, snippet(m.body)),
        nameCell(projectName(m.from_workspace, m.from_project, m.from_hidden)),
        nameCell(projectName(m.to_workspace, m.to_project, m.to_hidden)),
        state, el("td", {}, m.created_at || ""));
      body.append(tr);
      if (open) { body.append(detailRow(m)); }
    }
  }

  function detailRow(m) {
    const tr = el("tr", { class: "detail", id: "detail-" + m.id });
    const td = el("td", { colspan: "6" });
    tr.append(td);
    if (ui.editing.has(m.id)) {
      td.append(editor(m));
      return tr;
    }
    td.append(el("pre", { class: "body", "aria-label": "Message text" }, m.body || ""));
    const dl = el("dl", { class: "meta", "aria-label": "Provenance" });
    const add = (k, v) => { dl.append(el("dt", {}, k), el("dd", {}, v === null || v === undefined ? "—" : v)); };
    add("From workspace", m.from_hidden ? "(hidden)" : m.from_workspace);
    add("From project", m.from_hidden ? "(hidden)" : m.from_project);
    // "other", "web" and each nature are explained beside them (/web/api/me's meanings).
    const meant = (kind, v) => {
      const words = ui.me && ui.me.meanings && ui.me.meanings[kind] && ui.me.meanings[kind][v];
      return words ? v + " (" + words + ")" : v;
    };
    add("From agent", meant("from_agent", m.from_agent));
    add("From user", m.from_owner_user);
    add("To agent", m.to_agent || "any (shared)");
    add("Subject", m.subject);
    add("Nature", meant("nature", m.nature));
    add("Evidence", m.evidence);
    add("Message id", m.id);
    if (m.state === "claimed") { add("Collected", (m.claimed_by_agent || "") + " " + (m.claimed_at || "")); }
    if (m.lease_until) { add("Lease until", m.lease_until); }
    if (m.deliveries && m.deliveries > 1) {
      add("Deliveries", m.deliveries + " (handed out again after a lease ran out)");
    }
    if (m.completion) {
      add("Outcome", m.completion.result + " " + (m.completion.completed_at || ""));
      add("Outcome note", m.completion.note);
    }
    if (m.in_reply_to) { add("In reply to", m.in_reply_to); }
    if (m.thread_id) { add("Thread", m.thread_id); }
    if (m.state === "editing") { add("Edited by", m.editing_by_user); }
    if (m.state === "awaiting_approval") { add("Held because", m.approval_note); }
    if (m.approval_decision) {
      add("Approval", m.approval_decision + " by " + (m.approval_decided_by || "?") +
          (m.approval_reason ? ": " + m.approval_reason : ""));
    }
    td.append(dl);
    if (m.state === "claimed" && !m.completion) {
      td.append(el("p", {}, m.lease_until
        ? "Collected under a lease: unless the agent renews or completes it by then, it goes back to the queue."
        : "Collected records the agent's claim; completion of the request is not confirmed."));
    }
    if (ui.box === "received") { td.append(replyControl(m), " "); }
    if (m.thread_id && ui.thread !== m.thread_id) {
      const t = el("button", { type: "button" }, "Show thread");
      t.addEventListener("click", () => { ui.thread = m.thread_id; ui.page = 0; refresh(); });
      td.append(t, " ");
    }
    const canEdit = ui.box === "received" && ui.me && ui.me.can_edit;
    if (canEdit && m.state === "pending") {
      const b = el("button", { type: "button" }, "Edit");
      b.addEventListener("click", () => startEdit(m, td));
      td.append(b);
    }
    if (canEdit && m.state === "awaiting_approval") {
      td.append(approvalControls(m, td));
    }
    if (canEdit && m.state === "editing") {
      const c = el("button", { type: "button" }, "Continue editing");
      c.addEventListener("click", () => { ui.editing.add(m.id); renderRows(ui.rows); });
      const d = el("button", { type: "button" }, "Discard changes");
      d.addEventListener("click", () => discard(m, td));
      td.append(c, " ", d);
    }
    td.append(el("p", { role: "alert", class: "row-error" }));
    return tr;
  }

  // Reply: the composer addressed to the sender's project (and agent, when
  // it has a session there), the subject the server proposes ("Re: ...", or
  // "decision-reply: ID" to a "decision:" question), sent in its thread.
  // A sender project the viewer may not write (or not even read) disables it.
  function replyControl(m) {
    const to = m.from_hidden ? null : byKey(m.from_workspace + "/" + m.from_project);
    const b = el("button", { type: "button" }, "Reply");
    if (to && to.writable) {
      b.addEventListener("click", () => openReply(m, to));
      return b;
    }
    b.disabled = true;
    const span = el("span");
    span.append(b, " ", el("span", { class: "explain" },
                           "You may not send to the sender's project, so you cannot reply here."));
    return span;
  }

  // An approver's decision: write on this project; made once, by the
  // mailbox's owner, so a second approver elsewhere gets a clear 409.
  function approvalControls(m, td) {
    const box = el("div", { class: "approval", role: "group", "aria-label": "Approval" });
    const reasonId = "approval-reason-" + m.id;
    const reason = el("input", { id: reasonId, maxlength: "500" });
    const decide = async (verb) => {
      try {
        await post("/web/api/messages/" + encodeURIComponent(m.id) + "/" + verb,
                   { reason: reason.value || null });
        await refresh();
      } catch (e) {
        rowError(td, e.status === 409 ? "Already decided: " + e.message : e.message);
      }
    };
    const yes = el("button", { type: "button", class: "primary" }, "Approve");
    yes.addEventListener("click", () => decide("approve"));
    const no = el("button", { type: "button" }, "Reject");
    no.addEventListener("click", () => decide("reject"));
    box.append(el("label", { for: reasonId }, "Reason (optional)"), reason, " ", yes, " ", no);
    return box;
  }

  function rowError(td, text) {
    let a = td.querySelector(".row-error");
    if (!a) { a = el("p", { role: "alert", class: "row-error" }); td.append(a); }
    a.textContent = text;
  }

  async function startEdit(m, td) {
    try {
      const res = await post("/web/api/messages/" + encodeURIComponent(m.id) + "/edit", {});
      Object.assign(m, res.message);
      ui.editing.add(m.id);
      renderRows(ui.rows);
      refreshHeldOnly();
    } catch (e) {
      rowError(td, e.status === 409 ? "This message can no longer be edited: " + e.message
                                    : e.message);
    }
  }

  async function refreshHeldOnly() {
    const p = ui.current;
    if (!p) { return; }
    try {
      renderHeld(await api("/web/api/held?workspace=" + encodeURIComponent(p.workspace) +
                           "&project=" + encodeURIComponent(p.project)));
    } catch (e) { /* the list shows errors */ }
  }

  function editor(m) {
    const sec = el("section", { class: "editor", "aria-label": "Edit message" });
    const subjId = "edit-subject-" + m.id;
    const bodyId = "edit-body-" + m.id;
    const subj = el("input", { id: subjId, maxlength: "2000" });
    subj.value = m.subject || "";
    const text = el("textarea", { id: bodyId });
    text.value = m.body || "";
    const save = el("button", { type: "button", class: "primary" }, "Save and requeue");
    const disc = el("button", { type: "button" }, "Discard changes");
    const status = el("p", { role: "alert", class: "row-error" });
    save.addEventListener("click", async () => {
      try {
        await post("/web/api/messages/" + encodeURIComponent(m.id) + "/save",
                   { subject: subj.value || null, body: text.value });
        ui.editing.delete(m.id);
        await refresh();
      } catch (e) { status.textContent = e.message; }
    });
    disc.addEventListener("click", () => discard(m, sec));
    sec.append(el("label", { for: subjId }, "Subject"), subj,
               el("label", { for: bodyId }, "Message text"), text,
               el("p"), save, " ", disc, status);
    return sec;
  }

  async function discard(m, where) {
    try {
      await post("/web/api/messages/" + encodeURIComponent(m.id) + "/discard", {});
      ui.editing.delete(m.id);
      await refresh();
    } catch (e) { rowError(where, e.message); }
  }

  // -- composer --------------------------------------------------------------
  const writable = () => ui.projects.filter((p) => p.writable);

  function fillProjects(select, chosen) {
    select.replaceChildren();
    for (const p of writable()) {
      const o = el("option", { value: key(p) }, key(p));
      if (chosen && key(chosen) === key(p)) { o.selected = true; }
      select.append(o);
    }
  }

  const byKey = (k) => ui.projects.find((p) => key(p) === k);

  async function fillAgents(wanted) {
    const to = byKey($("to-project").value);
    const sel = $("to-agent");
    sel.replaceChildren();
    const note = $("no-agent");
    let list = [];
    if (to) {
      try {
        list = (await api("/web/api/harnesses?workspace=" + encodeURIComponent(to.workspace) +
                          "&project=" + encodeURIComponent(to.project))).harnesses;
      } catch (e) { list = []; }
    }
    if (!list.length) {
      sel.disabled = true;
      $("send").disabled = true;
      note.hidden = false;
      note.textContent = "No agent has a session in " + (to ? key(to) : "this project") +
        ", so there is nobody to send to. Register one by starting an agent session there " +
        "(ai-memory session start, or any MCP client's first call in that project), then " +
        "reopen the composer.";
      return;
    }
    sel.disabled = false;
    $("send").disabled = false;
    note.hidden = true;
    sel.append(el("option", { value: "" }, "Any of them (shared mail)"));
    for (const h of list) { sel.append(el("option", { value: h }, h)); }
    if (wanted && list.includes(wanted)) { sel.value = wanted; }
  }

  // Opens the composer addressed to project p (and, from an agent card, to
  // that agent). From is p when the viewer may send from it, else the first
  // project the viewer may write.
  async function openComposer(p, agent) {
    setReply(null);
    $("composer").hidden = false;
    const from = p.writable ? p : writable()[0];
    fillProjects($("from-project"), from);
    fillProjects($("to-project"), p);
    $("composer-status").textContent = "";
    $("subject").focus();
    await fillAgents(agent);
  }

  function setReply(m) {
    ui.replyTo = m;
    const line = $("reply-line");
    line.hidden = !m;
    line.textContent = m ? "Reply to message " + m.id + (m.subject ? " (" + m.subject + ")" : "") +
                           ", in thread " + (m.thread_id || m.id) : "";
  }

  // From is the project that received m when the viewer may write it.
  async function openReply(m, to) {
    setReply(m);
    const here = byKey(m.to_workspace + "/" + m.to_project);
    $("composer").hidden = false;
    fillProjects($("from-project"), here && here.writable ? here : writable()[0]);
    fillProjects($("to-project"), to);
    $("subject").value = m.reply_subject || "";
    $("body").value = "";
    $("composer-status").textContent = "";
    $("composer").scrollIntoView();
    $("body").focus();
    await fillAgents(m.from_agent);
  }

  async function send() {
    const from = byKey($("from-project").value);
    const to = byKey($("to-project").value);
    const status = $("composer-status");
    const token = $("write-token");
    const extra = {};
    if (ui.me.legacy) { extra["X-AI-Memory-Write-Token"] = token.value; }
    token.value = ""; // used for this one message only, kept nowhere
    try {
      const res = await post("/web/api/messages", {
        from_workspace: from.workspace, from_project: from.project,
        to_workspace: to.workspace, to_project: to.project,
        to_agent: $("to-agent").value || null,
        subject: $("subject").value || null, body: $("body").value,
        in_reply_to: ui.replyTo ? ui.replyTo.id : null,
      }, extra);
      status.textContent = "Sent (message " + res.message_id +
        (res.in_reply_to ? ", a reply in thread " + res.thread_id : "") + ").";
      setReply(null);
      $("subject").value = "";
      $("body").value = "";
      await refresh();
    } catch (e) {
      status.textContent = "Not sent: " + e.message;
    }
  }

  // -- start -----------------------------------------------------------------
  // The projects the viewer may read, asked again every 2 s while the node
  // cannot answer (it is still recovering, say): the page says why, rather
  // than staying empty.
  async function loadProjects() {
    for (;;) {
      try {
        const projects = (await api("/web/api/projects")).projects;
        $("list-error").textContent = "";
        return projects;
      } catch (e) {
        $("list-error").textContent = "Could not load your projects (" + e.message +
          "); trying again.";
        await new Promise((resolve) => setTimeout(resolve, 2000));
      }
    }
  }

  async function start() {
    try {
      ui.me = await api("/web/api/me");
    } catch (e) {
      window.location.assign("/web/login");
      return;
    }
    $("who").textContent = ui.me.anonymous ? "Anonymous mode" : "Logged in as " + ui.me.name +
      (ui.me.legacy ? " (legacy login: read only, a write token per message)" : "");
    $("anon-banner").hidden = !ui.me.anonymous;
    $("logout").hidden = ui.me.anonymous || ui.me.legacy;
    for (const e of document.querySelectorAll(".legacy-only")) { e.hidden = !ui.me.legacy; }
    ui.projects = await loadProjects();
    const wanted = decodeURIComponent(window.location.hash.slice(1));
    const first = byKey(wanted) || ui.projects[0] || null;
    renderSidebar();
    if (first) { await select(first); }
  }

  // The fragment names the project shown: a link to one, an edited address
  // or Back selects it (a fragment that names no project the viewer may read,
  // or names the one shown, changes nothing; before the list has loaded,
  // start() reads the fragment itself).
  window.addEventListener("hashchange", () => {
    const p = byKey(decodeURIComponent(window.location.hash.slice(1)));
    if (p && (!ui.current || key(p) !== key(ui.current))) { select(p); }
  });
  $("tab-received").addEventListener("click", () => { ui.box = "received"; ui.page = 0; ui.thread = null; refresh(); });
  $("tab-sent").addEventListener("click", () => { ui.box = "sent"; ui.page = 0; ui.thread = null; refresh(); });
  $("prev").addEventListener("click", () => { if (ui.page > 0) { ui.page -= 1; refresh(); } });
  $("next").addEventListener("click", () => { ui.page += 1; refresh(); });
  $("from-project").addEventListener("change", () => {
    // Changing the source resets the destination to it and clears the agent.
    fillProjects($("to-project"), byKey($("from-project").value));
    fillAgents();
  });
  $("to-project").addEventListener("change", fillAgents);
  $("send").addEventListener("click", send);
  $("close-composer").addEventListener("click", () => { $("composer").hidden = true; setReply(null); });
  $("logout").addEventListener("click", async () => {
    try { await post("/web/logout", {}); } finally { window.location.assign("/web/login"); }
  });
  start();
}());
