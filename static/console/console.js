/*
 * AgentLoom console: the live parts of the chat, journal and context pages.
 *
 * Everything comes from the REST API (session cookie + CSRF header). Data is only ever put
 * into the page as text (textContent / text nodes), never parsed as HTML.
 */
(function () {
  "use strict";

  const API = "/api/v1";
  const POLL_MS = 1000;
  const ACTIVE = ["queued", "running"];
  const JOURNAL_MAX = 200;
  const FEEDBACK_PREFIX = "[feedback] ";
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

  /** Build an element; string children become text nodes, never markup. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined && child !== false) node.append(child);
    }
    return node;
  }

  function badge(kind, value) {
    return el("span", { class: `badge ${kind}-${value}` }, String(value));
  }

  function formatTime(iso) {
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso || "");
    return date.toISOString().slice(0, 19).replace("T", " ");
  }

  function messageText(message) {
    const content = message ? message.content : null;
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content
        .filter((part) => part && typeof part === "object")
        .map((part) => String(part.text ?? ""))
        .join("\n");
    }
    return String(content);
  }

  function prettyArguments(raw) {
    if (typeof raw !== "string") return JSON.stringify(raw, null, 2) ?? "";
    try {
      return JSON.stringify(JSON.parse(raw), null, 2);
    } catch (error) {
      return raw;
    }
  }

  /** Mirror of sessions_app/console.py present_record. */
  function present(item, callNames) {
    const message = item.message || {};
    const shown = { ...item, text: messageText(message), toolCalls: [] };
    for (const call of message.tool_calls || []) {
      const fn = call.function || {};
      const name = String(fn.name || "?");
      callNames[String(call.id)] = name;
      shown.toolCalls.push({ id: call.id, name, arguments: prettyArguments(fn.arguments) });
    }
    if (message.role === "tool") {
      shown.toolCallId = String(message.tool_call_id);
      shown.toolName = callNames[shown.toolCallId] || "tool";
    }
    if (item.kind === "feedback" && shown.text.startsWith(FEEDBACK_PREFIX)) {
      shown.text = shown.text.slice(FEEDBACK_PREFIX.length);
    }
    if (item.kind === "status") {
      shown.status = message.status;
      shown.error = message.error || "";
    }
    shown.chars = shown.text.length;
    return shown;
  }

  function toolCallNodes(calls) {
    return calls.map((call) =>
      el("div", { class: "tool-call", "data-call-id": call.id },
        el("code", null, call.name), " ", el("span", { class: "quiet" }, String(call.id)),
        el("pre", null, call.arguments)));
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

  /** Mirror of sessions_app/console.py _share_text: never 0% beside a visible fill. */
  function shareText(estimate, ceiling) {
    const share = (100 * estimate) / Math.max(ceiling, 1);
    return share > 0 && share < 1 ? "<1" : String(Math.round(share));
  }

  function updateMeter(root, context) {
    if (!root || !context) return;
    // The ceiling is the effective budget, or the character threshold of a legacy version.
    const budget = context.ceiling;
    const scale = Math.max(budget, context.estimate, context.trigger_at, 1);
    const percent = (value) => `${((100 * value) / scale).toFixed(2)}%`;
    root.querySelector("[data-meter-fill]").style.width = percent(context.estimate);
    root.querySelector("[data-meter-trigger]").style.left = percent(context.trigger_at);
    root.querySelector("[data-meter-target]").style.left = percent(context.target_at);
    root.querySelector("[data-meter-budget-line]").style.left = percent(budget);
    const set = (selector, value) => { root.querySelector(selector).textContent = String(value); };
    set("[data-meter-estimate]", context.estimate);
    set("[data-meter-budget]", budget);
    set("[data-meter-share]", shareText(context.estimate, budget));
    set("[data-meter-trigger-at]", context.trigger_at);
    set("[data-meter-target-at]", context.target_at);
    set("[data-meter-compactions]", context.compactions.length);
    if (context.estimator) set("[data-meter-estimator]", context.estimator);
    const level = context.estimate > budget ? "over" : context.estimate >= context.trigger_at ? "high" : "ok";
    root.className = `meter meter-${level}`;
  }

  // --- chat -------------------------------------------------------------------------------

  /** Mirror of templates/console/_chat_record.html. */
  function renderChatRecord(record) {
    const seq = record.seq;
    if (record.kind === "assistant" && record.toolCalls.length) {
      const names = record.toolCalls.flatMap((call, i) => [i ? ", " : "", el("code", null, call.name)]);
      return el("details", { class: "tool-calls", "data-seq": seq },
        el("summary", null, `Tool call${record.toolCalls.length > 1 ? "s" : ""}: `, names),
        record.text ? el("p", { class: "text" }, record.text) : null,
        toolCallNodes(record.toolCalls));
    }
    if (record.kind === "assistant") {
      return el("div", { class: "msg answer", "data-seq": seq },
        el("div", { class: "who" }, "Agent"), el("div", { class: "text" }, record.text));
    }
    if (record.kind === "tool_result") {
      return el("details", { class: "tool-result", "data-seq": seq },
        el("summary", null, "Result of ", el("code", null, record.toolName), ` · ${record.chars} chars`),
        el("pre", null, record.text));
    }
    if (record.kind === "supplement") {
      return el("div", { class: "msg supplement", "data-seq": seq },
        el("div", { class: "who" }, "Supplement"), el("div", { class: "text" }, record.text));
    }
    if (record.kind === "feedback") {
      return el("p", { class: "feedback", "data-seq": seq },
        el("span", { class: "feedback-label" }, "Note to the agent"), " ", el("span", { class: "text" }, record.text));
    }
    if (record.kind === "status") {
      return el("p", { class: "status-line", "data-seq": seq },
        badge("status", record.status), record.error ? ` ${record.error}` : "");
    }
    return null; // user_input: the question already heads the run's block
  }

  /** Mirror of the compaction branch of templates/console/_chat_record.html. */
  function renderCompactionMark(href, number, item) {
    const sizes = item.before !== null && item.after !== null ? `: ${item.before} → ${item.after}` : "";
    return el("p", { class: "compaction-mark", "data-compaction": number },
      el("a", { href: `${href}#compaction-${number}` },
        `Context compacted here${item.stage ? ` (${item.stage})` : ""}${sizes}`));
  }

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
    const marked = cfg.marked || {};
    const contextLink = document.querySelector("[data-context-link]");
    const callNames = cfg.callNames || {};
    let lastSeq = cfg.lastSeq;
    let activeRun = cfg.activeRun;
    let focusRun = cfg.focusRun;
    let timer = null;

    function say(text, isError) {
      notice.textContent = text;
      notice.className = isError ? "notice error" : "notice";
      notice.hidden = !text;
    }

    /** Say `text` next to the control it answers (a supplement or a cancel). */
    function sayBeside(node, text, isError) {
      node.textContent = text;
      node.className = isError ? "inline-notice error-text" : "inline-notice";
      node.hidden = !text;
    }

    /** A run is active: no new question, and the indicator says whether the model is asked. */
    function showActive(active, inFlight) {
      askButton.disabled = active;
      askButton.title = active ? "A run is active" : "";
      thinking.hidden = !(active && inFlight);
    }

    /** Mark the run's compactions in its block, each after the record it came after. */
    function placeCompactions(runId, compactions) {
      const block = document.getElementById(`run-${runId}`);
      if (!block) return;
      const done = marked[String(runId)] || (marked[String(runId)] = []);
      const records = block.querySelector(".records");
      const href = cfg.contextUrl.replace("{id}", String(runId));
      compactions.forEach((item, index) => {
        const number = index + 1;
        if (item.outcome !== "succeeded" || done.includes(number)) return;
        const mark = renderCompactionMark(href, number, item);
        const after = item.journal_seq ? records.querySelector(`[data-seq="${item.journal_seq}"]`) : null;
        if (after) {
          // After the record and any marks already placed behind it.
          let anchor = after;
          while (anchor.nextElementSibling && anchor.nextElementSibling.classList.contains("compaction-mark")) {
            anchor = anchor.nextElementSibling;
          }
          anchor.after(mark);
        } else {
          records.prepend(mark);
        }
        done.push(number);
      });
    }

    function runBlock(run) {
      let block = document.getElementById(`run-${run.id}`);
      if (block) return block;
      const none = document.getElementById("no-runs");
      if (none) none.remove();
      const contextHref = cfg.contextUrl.replace("{id}", String(run.id));
      block = el("article", { class: "run", id: `run-${run.id}`, "data-run-id": run.id },
        el("header", { class: "run-head" },
          el("h3", null, `Run #${run.number ?? "?"}`),
          el("span", { class: `badge status-${run.status}`, "data-run-status": true }, run.status || ""),
          el("span", { class: "quiet", "data-run-attempt": true }),
          el("a", { href: contextHref }, "Context"),
          cfg.adminRunUrl
            ? [" ", el("a", { href: cfg.adminRunUrl.replace("{id}", String(run.id)), class: "admin-link" }, "Admin")]
            : null,
          el("button", { type: "button", class: "small", "data-resume": run.id, hidden: true }, "Resume")),
        run.question !== undefined
          ? el("div", { class: "msg question" }, el("div", { class: "who" }, "You"), el("div", { class: "text" }, run.question))
          : null,
        el("div", { class: "records" }));
      conversation.insertBefore(block, thinking);
      return block;
    }

    function toolCallCount(runId) {
      const block = document.getElementById(`run-${runId}`);
      return block ? block.querySelectorAll(".records .tool-call").length : 0;
    }

    function showTools(runId) {
      const block = document.getElementById(`run-${runId}`);
      const count = toolCallCount(runId);
      let text = String(count);
      if (block && count) {
        const calls = block.querySelectorAll(".records .tool-call");
        const last = calls[calls.length - 1];
        const name = last.querySelector("code").textContent;
        const answered = block.querySelectorAll(".records .tool-result").length;
        text += answered < count ? ` (running ${name})` : ` (last: ${name})`;
      }
      panel.querySelector("[data-live-tools]").textContent = text;
      // Every main-instance answer of the model in the run, with or without tool calls.
      const steps = block ? block.querySelectorAll(".records .msg.answer, .records .tool-calls").length : 0;
      panel.querySelector("[data-live-run-steps]").textContent = String(steps);
    }

    /** Show a run object (from the API) in its block and, if it is the focus, in the panel. */
    function showRun(run) {
      const block = runBlock(run);
      const status = block.querySelector("[data-run-status]");
      status.textContent = run.status;
      status.className = `badge status-${run.status}`;
      block.querySelector("[data-run-attempt]").textContent = run.attempt > 1 ? `attempt ${run.attempt}` : "";
      block.querySelector("[data-resume]").hidden = !["failed", "cancelled"].includes(run.status);
      if (!focusRun || focusRun.id === run.id || ACTIVE.includes(run.status)) {
        focusRun = { id: run.id, number: run.number, status: run.status };
        panel.hidden = false;
        panel.querySelector("[data-live-number]").textContent = `#${run.number}`;
        const live = panel.querySelector("[data-live-status]");
        live.textContent = run.status;
        live.className = `badge status-${run.status}`;
        const counters = run.counters || {};
        const sinceCompaction = (counters.model_steps || 0) - (counters.baseline_model_steps || 0);
        panel.querySelector("[data-live-steps]").textContent =
          `${counters.model_steps ?? 0} (${sinceCompaction} since the last compaction)`;
        panel.querySelector("[data-live-turns]").textContent = String(counters.user_turns ?? 0);
        const error = panel.querySelector("[data-live-error]");
        error.textContent = run.error || "–";
        error.className = run.error ? "error-text" : "";
        showTools(run.id);
        if (contextLink) {
          contextLink.href = cfg.contextUrl.replace("{id}", String(run.id));
          contextLink.textContent = `Context of run #${run.number}`;
          contextLink.hidden = false;
        }
      }
      const active = ACTIVE.includes(run.status);
      if (run.id === activeRun || active) {
        controls.hidden = !active;
        activeHint.hidden = !active;
        // A running run asked to stop stays `running` until its next safe point.
        const cancelling = active && Boolean(run.cancel_requested);
        cancelButton.disabled = cancelling;
        cancelButton.textContent = cancelling ? "Cancelling…" : "Cancel run";
        showActive(active, Boolean(run.model_call_in_flight));
      }
    }

    /** Append every new main-instance record to its run's block. */
    async function fetchJournal() {
      for (;;) {
        const page = await api("GET",
          `/sessions/${cfg.session}/messages?instance=main&limit=${JOURNAL_MAX}&after=${lastSeq}`);
        if (!page.ok) return;
        const follow = nearBottom();
        let shown = null;
        for (const item of page.data.items) {
          const record = present(item, callNames);
          const node = renderChatRecord(record);
          if (node) {
            runBlock({ id: item.run_id }).querySelector(".records").append(node);
            shown = node;
          }
        }
        // The chat follows new records unless the reader scrolled up to read older ones.
        if (shown && follow) thinking.scrollIntoView({ block: "nearest" });
        lastSeq = page.data.next_after;
        if (page.data.items.length < JOURNAL_MAX) return;
      }
    }

    function showPlan(plan) {
      const shown = panel.querySelector("[data-live-plan]");
      shown.textContent = plan || "";
      shown.hidden = !plan;
      panel.querySelector("[data-live-no-plan]").hidden = Boolean(plan);
    }

    async function refreshMeter(runId) {
      const context = await api("GET", `/runs/${runId}/context`);
      if (context.ok) {
        updateMeter(panel.querySelector("[data-meter]"), context.data);
        showPlan(context.data.plan);
        placeCompactions(runId, context.data.compactions);
      }
    }

    async function poll() {
      timer = null;
      const runId = activeRun;
      if (!runId) return;
      const run = await api("GET", `/runs/${runId}/`);
      await fetchJournal();
      if (run.ok) showRun(run.data);
      await refreshMeter(runId);
      if (run.ok && !ACTIVE.includes(run.data.status)) {
        // The final status and its records are saved together: one more read gets them all.
        await fetchJournal();
        showRun(run.data);
        activeRun = null;
        controls.hidden = true;
        activeHint.hidden = true;
        showActive(false, false);
        sayBeside(supplementNotice, "", false);
        sayBeside(cancelNotice, "", false);
        if (run.data.status === "failed") say(`Run #${run.data.number} failed: ${run.data.error}`, true);
        else if (!notice.classList.contains("error")) say("", false);
        return;
      }
      if (activeRun === runId) timer = setTimeout(poll, POLL_MS);
    }

    function follow(run) {
      activeRun = run.id;
      showRun(run);
      if (timer) clearTimeout(timer);
      timer = setTimeout(poll, 0);
    }

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
    function showSize() {
      const size = questionSize(askField.value);
      const unit = cfg.inputLegacy ? "characters" : cfg.inputUnit === "bytes" ? "bytes" : "tokens (approx.)";
      askSize.textContent = `${size.toLocaleString()} of ${cfg.inputLimit.toLocaleString()} ${unit}`;
      askSize.classList.toggle("error-text", size > cfg.inputLimit);
    }
    askField.addEventListener("input", showSize);
    showSize();

    // Enter sends, Shift+Enter breaks the line (and Enter while composing text in an IME
    // only confirms the composition).
    askField.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
      event.preventDefault();
      if (!askButton.disabled && askField.value.trim()) askForm.requestSubmit(askButton);
    });

    askForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const field = askForm.querySelector("textarea[name=question]");
      askButton.disabled = true;
      const answer = await api("POST", `/sessions/${cfg.session}/runs`, { question: field.value });
      askButton.disabled = Boolean(activeRun);
      if (!answer.ok) {
        say(answer.status === 409 ? `Not asked: ${errorText(answer.data)}` : errorText(answer.data), true);
        return;
      }
      say("", false);
      field.value = "";
      showSize();
      follow(answer.data);
      runBlock(answer.data).scrollIntoView({ block: "nearest" });
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
      showRun(answer.data);
      sayBeside(cancelNotice, answer.data.status === "cancelled"
        ? "Run cancelled."
        : "Cancel requested: the run stops at its next safe point.", false);
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
      follow(answer.data);
    });

    if (focusRun) showTools(focusRun.id);
    // The page opens at the latest run.
    const blocks = conversation.querySelectorAll("article.run");
    if (blocks.length) blocks[blocks.length - 1].scrollIntoView({ block: "start" });
    if (activeRun) timer = setTimeout(poll, 0);
  }

  // --- journal viewer ---------------------------------------------------------------------

  /** Mirror of templates/console/_journal_row.html. */
  function renderJournalRow(record) {
    let body;
    if (record.kind === "tool_result") {
      body = el("details", null,
        el("summary", null, "Result of ", el("code", null, record.toolName), " ",
          el("span", { class: "quiet" }, record.toolCallId), ` · ${record.chars} chars`),
        el("pre", null, record.text));
    } else if (record.kind === "status") {
      body = [badge("status", record.status),
        record.error ? [" ", el("span", { class: "error-text" }, record.error)] : null];
    } else {
      body = [record.text ? el("div", { class: "text" }, record.text) : null, toolCallNodes(record.toolCalls)];
    }
    const child = record.instance !== "main";
    return el("li", { class: `rec kind-${record.kind}`, "data-seq": record.seq, "data-instance": record.instance },
      el("div", { class: "rec-meta" },
        el("span", { class: "seq" }, `#${record.seq}`),
        el("span", { class: `badge kind kind-${record.kind}` }, record.kind),
        el("span", { class: child ? "badge instance child" : "badge instance" }, record.instance),
        el("time", { datetime: record.created_at }, formatTime(record.created_at))),
      el("div", { class: "rec-body" }, body));
  }

  function initJournal(cfg) {
    const timeline = document.getElementById("timeline");
    const more = document.getElementById("load-more");
    const end = document.getElementById("journal-end");
    const filter = document.getElementById("journal-filter");
    const callNames = cfg.callNames || {};
    let nextAfter = cfg.nextAfter;
    let lastRun = cfg.lastRun;

    filter.querySelector("select").addEventListener("change", () => filter.submit());
    if (!more) return;
    more.addEventListener("click", async (event) => {
      event.preventDefault();
      const params = new URLSearchParams({ after: String(nextAfter), limit: String(cfg.limit) });
      if (cfg.instance) params.set("instance", cfg.instance);
      const page = await api("GET", `/sessions/${cfg.session}/messages?${params}`);
      if (!page.ok) {
        end.hidden = false;
        end.textContent = errorText(page.data);
        return;
      }
      const empty = document.getElementById("timeline-empty");
      if (empty && page.data.items.length) empty.remove();
      for (const item of page.data.items) {
        if (item.run_id !== lastRun) {
          const run = cfg.runs[String(item.run_id)] || { number: "?", status: "" };
          timeline.append(el("li", { class: "run-boundary", "data-run-boundary": item.run_id },
            `Run #${run.number} `, badge("status", run.status)));
          lastRun = item.run_id;
        }
        timeline.append(renderJournalRow(present(item, callNames)));
      }
      nextAfter = page.data.next_after;
      more.href = `?${params.toString().replace(/after=\d+/, `after=${nextAfter}`)}`;
      if (page.data.items.length < cfg.limit) {
        more.hidden = true;
        end.hidden = false;
      }
    });
  }

  // --- context page -----------------------------------------------------------------------

  function initContext(cfg) {
    const runId = cfg.activeRun;
    if (!runId) return;
    const status = document.querySelector("[data-live-status]");
    const stale = document.getElementById("stale-note");
    const meter = document.querySelector("[data-meter]");
    async function poll() {
      const run = await api("GET", `/runs/${runId}/`);
      const context = await api("GET", `/runs/${runId}/context`);
      if (context.ok) {
        updateMeter(meter, context.data);
        // The history and the view below are rendered once; say when they are out of date.
        if (context.data.compactions.length !== cfg.compactions) stale.hidden = false;
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

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-meter]").forEach(placeMeter);
    // Forms that change something for good ask first (revoking a view).
    document.querySelectorAll("form[data-confirm]").forEach((form) => {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
    const cfg = config();
    if (!cfg) return;
    if (document.body.classList.contains("page-chat")) initChat(cfg);
    else if (document.body.classList.contains("page-journal")) initJournal(cfg);
    else if (document.body.classList.contains("page-context")) initContext(cfg);
  });
})();
