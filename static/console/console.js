/*
 * AgentLoom console: the live parts of the chat, journal and context pages.
 *
 * What the pages show is rendered once, by the server's templates: while a run is active the
 * script fetches the same templates served alone (new chat records, a run's block, the run
 * panel, the meter, journal rows) and puts them in place. Actions (ask, supplement, cancel,
 * resume) go through the REST API (session cookie + CSRF header); what they answer is only
 * ever put into the page as text.
 */
(function () {
  "use strict";

  const API = "/api/v1";
  const POLL_MS = 1000;
  const HOME_POLL_MS = 2000;
  const ACTIVE = ["queued", "running", "waiting_approval", "waiting_input"];
  // How close to the bottom (px) the reader must be for the chat to follow new records.
  const FOLLOW_SLACK = 240;

  // --- helpers ----------------------------------------------------------------------------

  function cookie(name) {
    for (const part of document.cookie.split(";")) {
      const [key, ...rest] = part.trim().split("=");
      if (key === name) return decodeURIComponent(rest.join("="));
    }
    return "";
  }

  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return cookie("csrftoken") || (field ? field.value : "");
  }

  /** Call the API; resolve to {ok, status, data} whatever happens (no exceptions). */
  async function api(method, path, body) {
    const options = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (method !== "GET") options.headers["X-CSRFToken"] = csrfToken();
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(API + path, options);
    } catch (error) {
      return { ok: false, status: 0, data: { detail: "The server did not answer. Check the connection." } };
    }
    let data;
    try {
      data = await response.json();
    } catch (error) {
      data = { detail: `Unexpected answer from the server (HTTP ${response.status}).` };
    }
    return { ok: response.ok, status: response.status, data };
  }

  /** Return an API error body as one readable line. */
  function errorText(data) {
    if (!data || typeof data !== "object") return "Something went wrong.";
    if (typeof data.detail === "string") return data.detail;
    return Object.entries(data)
      .map(([field, errors]) => `${field}: ${[].concat(errors).join(" ")}`)
      .join("; ");
  }

  /**
   * Fetch a server-rendered fragment of one of our own pages; resolve to {nodes, headers}, or
   * null when it is not there. The HTML is the server's templates, which escape every value.
   */
  async function fragment(path) {
    let response;
    try {
      response = await fetch(path, { credentials: "same-origin", headers: { Accept: "text/html" } });
    } catch (error) {
      return null;
    }
    if (!response.ok) return null;
    const template = document.createElement("template");
    template.innerHTML = await response.text();
    return { nodes: template.content, headers: response.headers };
  }

  function config() {
    const node = document.getElementById("console-config");
    return node ? JSON.parse(node.textContent) : null;
  }

  // --- the context meter ------------------------------------------------------------------

  /** Place the meter's bar and lines from their server-rendered `data-pos` (percent). */
  function placeMeter(root) {
    root.querySelectorAll("[data-pos]").forEach((node) => {
      const value = `${Number(node.dataset.pos) || 0}%`;
      if (node.hasAttribute("data-meter-fill")) node.style.width = value;
      else node.style.left = value;
    });
  }

  /** Put a freshly rendered meter in place of `old`; return the new one. */
  function swapMeter(old, rendered) {
    const meter = rendered.querySelector("[data-meter]");
    if (!old || !meter) return old;
    placeMeter(meter);
    old.replaceWith(meter);
    return meter;
  }

  // --- chat -------------------------------------------------------------------------------

  function nearBottom() {
    const root = document.documentElement;
    return root.scrollHeight - (window.scrollY + window.innerHeight) < FOLLOW_SLACK;
  }

  function initChat(cfg) {
    const conversation = document.getElementById("conversation");
    const panel = document.getElementById("live-panel");
    const controls = document.getElementById("run-controls");
    const activeHint = document.getElementById("active-hint");
    const cancelButton = document.getElementById("cancel-run");
    const notice = document.getElementById("notice");
    const askForm = document.getElementById("ask-form");
    const supplementForm = document.getElementById("supplement-form");
    const askButton = document.getElementById("ask-button");
    const thinking = document.getElementById("thinking");
    const supplementNotice = document.getElementById("supplement-notice");
    const cancelNotice = document.getElementById("cancel-notice");
    const contextLink = document.querySelector("[data-context-link]");
    const url = (template, id) => template.replace("{id}", String(id));
    let lastSeq = cfg.lastSeq;
    let activeRun = cfg.activeRun;
    // One poll at a time: asked for during a poll, the next one follows right after it.
    let timer = null;
    let polling = false;
    let pollAgain = false;

    function say(text, isError) {
      notice.textContent = text;
      notice.className = isError ? "notice error" : "notice";
      notice.hidden = !text;
      // The notice sits above the ask box and pushes it down: keep both in view.
      if (text) askForm.scrollIntoView({ block: "nearest" });
    }

    /** Say `text` next to the control it answers (a supplement or a cancel). */
    function sayBeside(node, text, isError) {
      node.textContent = text;
      node.className = isError ? "inline-notice error-text" : "inline-notice";
      node.hidden = !text;
    }

    /** Return the run's block, fetching it from the server when the page does not show it. */
    async function runBlock(runId) {
      const shown = document.getElementById(`run-${runId}`);
      if (shown) return shown;
      const rendered = await fragment(url(cfg.blockUrl, runId));
      const block = rendered && rendered.nodes.querySelector("article.run");
      if (!block) return null;
      if (document.getElementById(`run-${runId}`)) return document.getElementById(`run-${runId}`);
      const none = document.getElementById("no-runs");
      if (none) none.remove();
      conversation.insertBefore(block, thinking);
      return block;
    }

    /** Append the records after `lastSeq` to their runs' blocks, and place compaction marks. */
    async function fetchRecords(runId) {
      const follow = nearBottom();
      const rendered = await fragment(`${url(cfg.recordsUrl, cfg.session)}?after=${lastSeq}&run=${runId || ""}`);
      if (!rendered) return;
      let added = false;
      for (const group of rendered.nodes.querySelectorAll("[data-records-for]")) {
        const block = await runBlock(group.dataset.recordsFor);
        if (!block) continue;
        const records = block.querySelector(".records");
        // Records go before the streamed previews (stream.js), which belong to later calls.
        const preview = records.querySelector(":scope > [data-live-answer]");
        for (const node of [...group.children]) {
          // A block fetched just now already holds the records it was rendered with.
          // One record may render as two nodes (its Thinking, then its answer): match both.
          const same = `${node.localName}.${CSS.escape(node.classList[0] || "")}[data-seq="${node.dataset.seq}"]`;
          if (node.dataset.seq && records.querySelector(same)) continue;
          records.insertBefore(node, preview);
          added = true;
        }
      }
      for (const group of rendered.nodes.querySelectorAll("[data-marks-for]")) {
        const block = document.getElementById(`run-${group.dataset.marksFor}`);
        if (block) placeMarks(block.querySelector(".records"), group);
      }
      lastSeq = Math.max(lastSeq, Number(rendered.headers.get("X-Last-Seq")) || 0);
      // The chat follows new records unless the reader scrolled up to read older ones.
      if (added && follow) thinking.scrollIntoView({ block: "nearest" });
    }

    /** Put each compaction mark the block lacks right after the record it came after. */
    function placeMarks(records, group) {
      for (const mark of [...group.children]) {
        if (records.querySelector(`[data-compaction="${mark.dataset.compaction}"]`)) continue;
        const after = mark.dataset.afterSeq ? records.querySelector(`[data-seq="${mark.dataset.afterSeq}"]`) : null;
        if (!after) {
          records.prepend(mark);
          continue;
        }
        let anchor = after;
        while (anchor.nextElementSibling && anchor.nextElementSibling.classList.contains("compaction-mark")) {
          anchor = anchor.nextElementSibling;
        }
        anchor.after(mark);
      }
    }

    /** Show the run's state, as the freshly rendered panel gives it, around the page. */
    function showState(state) {
      const active = state.active === "true";
      const block = document.getElementById(`run-${state.runId}`);
      if (block) {
        const status = block.querySelector("[data-run-status]");
        status.textContent = state.status;
        status.className = `badge status-${state.status}`;
        block.querySelector("[data-run-attempt]").textContent = Number(state.attempt) > 1 ? `attempt ${state.attempt}` : "";
        block.querySelector("[data-resume]").hidden = !["failed", "cancelled"].includes(state.status);
      }
      if (contextLink) {
        contextLink.href = url(cfg.contextUrl, state.runId);
        contextLink.textContent = `Context of run #${state.number}`;
        contextLink.hidden = false;
      }
      controls.hidden = !active;
      activeHint.hidden = !active;
      // A running run asked to stop stays `running` until its next safe point.
      const cancelling = active && state.cancelRequested === "true";
      cancelButton.disabled = cancelling;
      cancelButton.textContent = cancelling ? "Cancelling…" : "Cancel run";
      askButton.disabled = active;
      askButton.title = active ? "A run is active" : "";
      thinking.hidden = !(active && state.thinking === "true");
    }

    /** Fetch the run panel of `runId` (null: not read). */
    async function readPanel(runId) {
      const rendered = await fragment(url(cfg.panelUrl, runId));
      return (rendered && rendered.nodes.querySelector("[data-live-summary]")) || null;
    }

    /**
     * Swap a fetched run panel in and show the run's state around the page, in one step (the
     * panel and the block's status never disagree); return the state.
     */
    function showPanel(summary) {
      summary.querySelectorAll("[data-meter]").forEach(placeMeter);
      // A note being typed for an approval survives the panel's refresh.
      const focused = document.activeElement && document.activeElement.dataset.approvalNote;
      document.querySelectorAll("[data-approval-note]").forEach((input) => {
        const fresh = summary.querySelector(`[data-approval-note="${CSS.escape(input.dataset.approvalNote)}"]`);
        if (fresh) fresh.value = input.value;
      });
      // So does what is typed into a tool server's question (by the input's id).
      document.querySelectorAll("[data-keep]").forEach((input) => {
        const fresh = summary.querySelector(`#${CSS.escape(input.id)}`);
        if (!fresh) return;
        if (input.type === "checkbox") fresh.checked = input.checked;
        else fresh.value = input.value;
        const open = fresh.closest("form") && fresh.closest("form").querySelector("[data-url-open]");
        if (open && input.dataset.urlConfirm !== undefined) open.hidden = !input.checked;
      });
      const focusedKept = document.activeElement && document.activeElement.dataset.keep !== undefined
        ? document.activeElement.id : "";
      document.getElementById("live-summary").replaceWith(summary);
      if (focusedKept) {
        const input = document.getElementById(focusedKept);
        if (input) input.focus();
      }
      if (focused) {
        const input = document.querySelector(`[data-approval-note="${CSS.escape(focused)}"]`);
        if (input) input.focus();
      }
      panel.hidden = false;
      const state = { ...summary.dataset };
      showState(state);
      // The streamed previews (stream.js) are shown once the panel says the run is running.
      document.dispatchEvent(new CustomEvent("agentloom:state", { detail: state }));
      return state;
    }

    /** Poll the followed run in `delay` ms, or right after the poll under way. */
    function pollSoon(delay) {
      if (polling) {
        pollAgain = true;
        return;
      }
      clearTimeout(timer);
      timer = setTimeout(poll, delay);
    }

    async function poll() {
      timer = null;
      const runId = activeRun;
      if (!runId) return;
      polling = true;
      pollAgain = false;
      let finished = false;
      try {
        finished = await pollRun(runId);
      } finally {
        polling = false;
      }
      // A run followed meanwhile (a new question, a resume) is polled at once.
      if (activeRun && (activeRun !== runId || pollAgain)) pollSoon(0);
      else if (activeRun === runId && !finished) pollSoon(POLL_MS);
    }

    /**
     * Show the run's new records and its state; return whether it has finished. Whatever was
     * read for a run no longer followed is left out: state belongs to the run it was read for.
     */
    async function pollRun(runId) {
      await fetchRecords(runId);
      const summary = await readPanel(runId);
      if (!summary || activeRun !== runId) return false;
      if (summary.dataset.active === "true") {
        showPanel(summary);
        return false;
      }
      // The final status and its records are saved together: one more read gets them all, and
      // the run is shown finished (Ask enabled) once they are on the page.
      await fetchRecords(runId);
      if (activeRun !== runId) return true;
      const state = showPanel(summary);
      activeRun = null;
      sayBeside(supplementNotice, "", false);
      sayBeside(cancelNotice, "", false);
      if (state.status === "failed") say(`Run #${state.number} failed: ${state.error}`, true);
      else if (!notice.classList.contains("error")) say("", false);
      return true;
    }

    // Between runs the chat watches the session, so a run started in another tab or through
    // the API shows up here within a second (and Ask is disabled while it is active).
    let watching = null;
    async function watch() {
      watching = null;
      if (!activeRun && document.visibilityState !== "hidden") {
        const rendered = await fragment(url(cfg.stateUrl, cfg.session));
        const state = rendered && rendered.nodes.querySelector("[data-session-state]");
        if (state && !activeRun) {
          const active = Number(state.dataset.activeRun) || null;
          const latest = Number(state.dataset.latestRun) || null;
          if (active) {
            await follow(active);
          } else if (Number(state.dataset.lastSeq) > lastSeq && latest) {
            // A run began and ended between two looks: show its records and final state.
            await runBlock(latest);
            await fetchRecords(latest);
            const summary = await readPanel(latest);
            if (summary && !activeRun) showPanel(summary);
          }
        }
      }
      if (!watching) watching = setTimeout(watch, POLL_MS);
    }

    async function follow(runId) {
      activeRun = runId;
      askButton.disabled = true;
      controls.hidden = false;
      activeHint.hidden = false;
      const block = await runBlock(runId);
      document.dispatchEvent(new CustomEvent("agentloom:follow", { detail: { runId } }));
      pollSoon(0);
      return block;
    }

    // The streamed answer (stream.js) asks for a record as soon as it lands, and for the run's
    // state when text streams while the panel still says `queued`.
    document.addEventListener("agentloom:records", async (event) => {
      await fetchRecords(event.detail.runId);
      if (activeRun) pollSoon(0);
    });
    document.addEventListener("agentloom:streaming", (event) => {
      if (event.detail.runId === activeRun) pollSoon(0);
    });

    // The size of the question as the agent's estimator will count it, against its limit:
    // exact for bytes (a user message's JSON plus its envelope), approximate for tokenizers.
    const askField = askForm.querySelector("textarea[name=question]");
    const askSize = document.getElementById("ask-size");
    const utf8 = new TextEncoder();
    function questionSize(text) {
      if (cfg.inputLegacy) return text.length;
      const bytes = utf8.encode(JSON.stringify({ role: "user", content: text })).length + 12;
      return cfg.inputUnit === "bytes" ? bytes : Math.ceil(bytes / 4);
    }
    const unit = cfg.inputLegacy ? "characters" : cfg.inputUnit === "bytes" ? "bytes" : "tokens";
    const approx = !cfg.inputLegacy && cfg.inputUnit !== "bytes";
    function showSize() {
      const size = questionSize(askField.value);
      askSize.textContent = `${askField.value.length.toLocaleString()} characters · ${approx ? "about " : ""}${size.toLocaleString()} of ${cfg.inputLimit.toLocaleString()} ${unit}`;
      askSize.classList.toggle("error-text", size > cfg.inputLimit || askField.value.length > cfg.questionMaxChars);
    }
    // The limit in characters, said before it is reached: plain text of one byte (or about a
    // quarter token) per character, beside the envelope every message carries.
    function showLimit() {
      const room = Math.max(cfg.inputLimit - questionSize(""), 0);
      const chars = Math.min(cfg.inputLegacy ? cfg.inputLimit : cfg.inputUnit === "bytes" ? room : room * 4, cfg.questionMaxChars);
      document.getElementById("ask-limit").textContent =
        `Questions up to about ${chars.toLocaleString()} characters (${cfg.inputLimit.toLocaleString()} ${unit}).`;
    }
    /** Return the door's refusal of the question as written, or "" when it may be sent. */
    function doorRefusal(text) {
      if (!text.trim()) return cfg.blankQuestion;
      const size = questionSize(text);
      if (size <= cfg.inputLimit) {
        if (text.length <= cfg.questionMaxChars) return "";
        return `This question has ${text.length.toLocaleString()} characters, above the limit of ${cfg.questionMaxChars.toLocaleString()} characters. Shorten it, or split it.`;
      }
      return `This question is estimated at ${approx ? "about " : ""}${size.toLocaleString()} ${unit}, above the limit of ${cfg.inputLimit.toLocaleString()} ${unit} that this agent's context budget leaves for one message (its compaction target, less the system prompt, tool schemas and the plan). Shorten it, or split it.`;
    }
    askField.addEventListener("input", showSize);
    showSize();
    showLimit();

    // Enter sends, Shift+Enter breaks the line (and Enter while composing text in an IME
    // only confirms the composition).
    askField.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
      event.preventDefault();
      if (!askButton.disabled && askField.value.trim()) askForm.requestSubmit(askButton);
    });

    askForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const refusal = doorRefusal(askField.value);
      if (refusal) {
        // Said before anything is sent; the text stays as typed.
        say(refusal, true);
        return;
      }
      askButton.disabled = true;
      const answer = await api("POST", `/sessions/${cfg.session}/runs`, { question: askField.value });
      if (!answer.ok) {
        askButton.disabled = Boolean(activeRun);
        say(answer.status === 409 ? `Not asked: ${errorText(answer.data)}` : errorText(answer.data), true);
        return;
      }
      say("", false);
      askField.value = "";
      showSize();
      const block = await follow(answer.data.id);
      if (block) block.scrollIntoView({ block: "nearest" });
    });

    supplementForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!activeRun) return;
      const field = supplementForm.querySelector("textarea[name=text]");
      const answer = await api("POST", `/runs/${activeRun}/supplements`, { text: field.value });
      if (!answer.ok) {
        sayBeside(supplementNotice, `Not sent: ${errorText(answer.data)}`, true);
        return;
      }
      field.value = "";
      sayBeside(supplementNotice,
        `Supplement ${answer.data.position} queued: the run takes it at its next safe point.`, false);
    });

    cancelButton.addEventListener("click", async () => {
      if (!activeRun) return;
      const answer = await api("POST", `/runs/${activeRun}/cancel`);
      if (!answer.ok) {
        sayBeside(cancelNotice, `Not cancelled: ${errorText(answer.data)}`, true);
        return;
      }
      const cancelled = answer.data.status === "cancelled";
      cancelButton.disabled = !cancelled;
      if (!cancelled) cancelButton.textContent = "Cancelling…";
      sayBeside(cancelNotice, cancelled
        ? "Run cancelled."
        : "Cancel requested: the run stops at its next safe point.", false);
      pollSoon(0);
    });

    panel.addEventListener("click", async (event) => {
      const button = event.target.closest("[data-decide]");
      if (!button) return;
      const note = document.querySelector(`[data-approval-note="${CSS.escape(button.dataset.call)}"]`);
      button.disabled = true;
      const answer = await api("POST", `/runs/${button.dataset.run}/approvals`, {
        call_id: button.dataset.call,
        decision: button.dataset.decide,
        note: note ? note.value : "",
      });
      const shown = document.getElementById("approval-notice");
      if (!answer.ok) {
        button.disabled = false;
        if (shown) sayBeside(shown, `Not decided: ${errorText(answer.data)}`, true);
        return;
      }
      if (shown) sayBeside(shown, button.dataset.decide === "approve" ? "Approved." : "Denied.", false);
      pollSoon(0);
    });

    /** Return the content of a question's form, typed as its fields say. */
    function formContent(form) {
      const content = {};
      form.querySelectorAll("[data-type]").forEach((input) => {
        const type = input.dataset.type;
        if (type === "boolean") content[input.name] = input.checked;
        else if (input.value === "") return;
        else if (type === "number" || type === "integer") content[input.name] = Number(input.value);
        else content[input.name] = input.value;
      });
      return content;
    }

    /** Send the person's answer to a tool server's question: accept, decline or cancel. */
    async function answerQuestion(form, action) {
      const body = { key: form.dataset.question, action };
      if (action === "accept" && form.dataset.mode === "url") {
        const confirmed = form.querySelector("[data-url-confirm]");
        body.url_confirmed = Boolean(confirmed && confirmed.checked);
      } else if (action === "accept") {
        body.content = formContent(form);
      }
      const buttons = form.querySelectorAll("[data-answer]");
      buttons.forEach((button) => { button.disabled = true; });
      const answer = await api("POST", `/runs/${form.dataset.run}/answers`, body);
      const shown = document.getElementById("question-notice");
      if (!answer.ok) {
        buttons.forEach((button) => { button.disabled = false; });
        if (shown) sayBeside(shown, `Not sent: ${errorText(answer.data)}`, true);
        return;
      }
      const said = { accept: "Answer sent.", decline: "Declined.", cancel: "Cancelled." };
      if (shown) sayBeside(shown, said[action], false);
      pollSoon(0);
    }

    panel.addEventListener("submit", (event) => {
      const form = event.target.closest("[data-question]");
      if (!form) return;
      event.preventDefault();
      answerQuestion(form, "accept");
    });

    panel.addEventListener("click", (event) => {
      const button = event.target.closest("[data-answer]");
      if (!button || button.dataset.answer === "accept") return;
      answerQuestion(button.closest("[data-question]"), button.dataset.answer);
    });

    panel.addEventListener("change", (event) => {
      const box = event.target.closest("[data-url-confirm]");
      if (!box) return;
      const open = box.closest("form").querySelector("[data-url-open]");
      if (open) open.hidden = !box.checked;
    });

    conversation.addEventListener("click", async (event) => {
      const button = event.target.closest("[data-resume]");
      if (!button) return;
      button.disabled = true;
      const answer = await api("POST", `/runs/${button.dataset.resume}/resume`);
      button.disabled = false;
      if (!answer.ok) {
        say(`Not resumed: ${errorText(answer.data)}`, true);
        return;
      }
      say(`Run #${answer.data.number} resumed (attempt ${answer.data.attempt}).`, false);
      button.hidden = true;
      await follow(answer.data.id);
    });

    // The page opens at the latest run, with the composer ready for typing; at its top instead
    // when it shows a message (the answer to a form it posted).
    const blocks = conversation.querySelectorAll("article.run");
    const message = document.querySelector(".messagelist");
    if (blocks.length && !message) blocks[blocks.length - 1].scrollIntoView({ block: "start" });
    askField.focus({ preventScroll: true });
    if (activeRun) pollSoon(0);
    watching = setTimeout(watch, POLL_MS);

    // `/` outside a text field goes to the composer.
    document.addEventListener("keydown", (event) => {
      if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
      const target = event.target;
      if (target.closest("input, textarea, select, [contenteditable]")) return;
      event.preventDefault();
      askField.focus();
    });
  }

  // --- home -------------------------------------------------------------------------------

  /** Refresh the table of sessions (latest runs and their status) while the page is open. */
  function initHome(cfg) {
    async function refresh() {
      if (document.visibilityState !== "hidden") {
        const page = new URLSearchParams(window.location.search).get("page");
        const rendered = await fragment(cfg.sessionsUrl + (page ? `?page=${encodeURIComponent(page)}` : ""));
        const table = rendered && rendered.nodes.querySelector("[data-sessions-table]");
        const shown = document.getElementById("sessions-table");
        if (table && shown) shown.replaceWith(table);
      }
      setTimeout(refresh, HOME_POLL_MS);
    }
    setTimeout(refresh, HOME_POLL_MS);
  }

  // --- journal viewer ---------------------------------------------------------------------

  /**
   * Call `changed(state)` whenever the session's journal grows (its last seq moves), looking
   * once a second while the page is shown: pages of a session follow runs started anywhere.
   */
  function watchSession(cfg, changed) {
    // The journal's last seq when the server rendered the page.
    let seen = cfg.sessionSeq;
    async function look() {
      if (document.visibilityState !== "hidden") {
        const rendered = await fragment(cfg.stateUrl);
        const state = rendered && rendered.nodes.querySelector("[data-session-state]");
        if (state) {
          const seq = Number(state.dataset.lastSeq);
          if (seq !== seen) await changed(state.dataset);
          seen = seq;
        }
      }
      setTimeout(look, POLL_MS);
    }
    setTimeout(look, POLL_MS);
  }

  function initJournal(cfg) {
    const timeline = document.getElementById("timeline");
    const more = document.getElementById("load-more");
    const end = document.getElementById("journal-end");
    const filter = document.getElementById("journal-filter");
    let nextAfter = cfg.nextAfter;
    let lastRun = cfg.lastRun;
    let hasMore = Boolean(more);

    // An empty search is no search: left out of the address, as the instance filter alone.
    const query = filter.querySelector("input[name=q]");
    const dropEmpty = () => {
      if (query && !query.value.trim()) query.disabled = true;
    };
    filter.addEventListener("submit", dropEmpty);
    filter.querySelector("select").addEventListener("change", () => {
      dropEmpty();
      filter.submit();
    });
    // Search results are ranked, not a timeline: nothing is appended to them.
    if (cfg.searched) return;

    async function loadRows() {
      const params = new URLSearchParams({ after: String(nextAfter), limit: String(cfg.limit) });
      if (cfg.instance) params.set("instance", cfg.instance);
      if (lastRun) params.set("run", String(lastRun));
      const rendered = await fragment(`${cfg.rowsUrl}?${params}`);
      if (!rendered) {
        end.hidden = false;
        end.textContent = "The journal could not be read; reload the page.";
        return;
      }
      const rows = rendered.nodes.querySelectorAll("li.rec");
      const empty = document.getElementById("timeline-empty");
      if (empty && rows.length) empty.remove();
      if (rows.length) lastRun = Number(rows[rows.length - 1].dataset.runId) || lastRun;
      timeline.append(rendered.nodes);
      nextAfter = Number(rendered.headers.get("X-Next-After")) || nextAfter;
      hasMore = rendered.headers.get("X-Has-More") === "true";
      if (more) {
        params.set("after", String(nextAfter));
        params.delete("run");
        more.href = `?${params}`;
        more.hidden = !hasMore;
      }
      end.hidden = hasMore;
    }

    if (more) {
      more.addEventListener("click", (event) => {
        event.preventDefault();
        loadRows();
      });
    }
    // At the end of the journal, new records (a run started anywhere) are appended as they come.
    watchSession(cfg, async () => {
      if (!hasMore) await loadRows();
    });
  }

  // --- context page -----------------------------------------------------------------------

  function initContext(cfg) {
    // A run started after this one (in any tab, or through the API) is named with a link.
    const newer = document.getElementById("newer-run");
    watchSession(cfg, async (state) => {
      const latest = Number(state.latestRun);
      if (!latest || latest === cfg.run) return;
      const link = newer.querySelector("a");
      link.href = cfg.contextUrl.replace("{id}", String(latest));
      newer.querySelector("[data-newer-name]").textContent = `Run #${state.latestNumber}`;
      newer.hidden = false;
    });
    const runId = cfg.activeRun;
    if (!runId) return;
    const status = document.querySelector("[data-live-status]");
    const stale = document.getElementById("stale-note");
    let meter = document.querySelector("[data-meter]");
    async function poll() {
      const run = await api("GET", `/runs/${runId}/`);
      const rendered = await fragment(cfg.meterUrl);
      if (rendered) {
        meter = swapMeter(meter, rendered.nodes);
        // The history and the view below are rendered once; say when they are out of date.
        const count = meter.querySelector("[data-meter-compactions]");
        if (count && Number(count.textContent) !== cfg.compactions) stale.hidden = false;
      }
      if (run.ok) {
        status.textContent = run.data.status;
        status.className = `badge status-${run.data.status}`;
        if (!ACTIVE.includes(run.data.status)) {
          stale.hidden = false;
          return;
        }
      }
      setTimeout(poll, POLL_MS);
    }
    setTimeout(poll, POLL_MS);
  }

  // --- rendered text: copy buttons and "Show all" ------------------------------------------

  /** Return the text a copy button copies: its code block's code, or its message as written. */
  function copiedText(button) {
    if (button.dataset.copy === "code") {
      const code = button.closest(".code-block").querySelector("code");
      return code ? code.textContent : "";
    }
    const raw = button.closest("[data-text-block]").querySelector("template[data-raw]");
    return raw ? raw.content.textContent : "";
  }

  async function copy(button) {
    const text = copiedText(button);
    const label = button.textContent;
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch (error) {
      button.textContent = "Not copied";
    }
    setTimeout(() => { button.textContent = label; }, 1500);
  }

  function toggleLong(button) {
    const block = button.previousElementSibling;
    if (!block || !block.hasAttribute("data-text-block")) return;
    if (!button.dataset.label) button.dataset.label = button.textContent;
    const collapsed = block.classList.toggle("collapsed");
    button.textContent = collapsed ? button.dataset.label : "Show less";
  }

  // Esc closes the panel that is open (a <details> such as "Rename or delete" or a tool call).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const open = [...document.querySelectorAll("details[open]")];
    const inner = event.target.closest && event.target.closest("details[open]");
    const panel = inner || open[open.length - 1];
    if (!panel) return;
    panel.open = false;
    const summary = panel.querySelector("summary");
    if (summary) summary.focus();
  });

  document.addEventListener("click", (event) => {
    const copyButton = event.target.closest("[data-copy]");
    if (copyButton) copy(copyButton);
    const showAll = event.target.closest("[data-show-all]");
    if (showAll) toggleLong(showAll);
  });

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-meter]").forEach(placeMeter);
    // Forms that change something for good ask first (revoking a view, deleting a session).
    document.querySelectorAll("form[data-confirm]").forEach((form) => {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
    const cfg = config();
    if (!cfg) return;
    if (document.body.classList.contains("page-chat")) initChat(cfg);
    else if (document.body.classList.contains("page-home")) initHome(cfg);
    else if (document.body.classList.contains("page-journal")) initJournal(cfg);
    else if (document.body.classList.contains("page-context")) initContext(cfg);
  });
})();
