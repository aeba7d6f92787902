/*
 * AgentLoom console: the answer of a running model call as it is generated.
 *
 * It follows `GET /api/v1/runs/{id}/events` (server-sent events) for each run the chat follows
 * (the `agentloom:follow` event of console.js, or the page's active run), and is the one owner
 * of the previews: `delta` events grow the preview of the call in flight at the end of the run's
 * block — the answer as plain text, reasoning in a folded "Thinking" block, tool calls as they
 * are decided; a summary call only says "Compacting the context…" — and `call_end` closes it. The n-th answering call of a run becomes its n-th
 * `assistant` record, so a preview goes exactly when that server-rendered record is in the
 * run's block, whoever put it there; a call that journals nothing (a cancel, a failure, a
 * compaction) loses its preview when it ends. Nothing else removes a preview: a status refresh
 * or a second follow of the same run never erases streamed text, and each run's previews are
 * cleared only by that run's own stream and records. A preview is shown once the run panel says
 * the run is past `queued` (console.js refreshes it when text waits), so the page's status is
 * never behind the stream. Text is only ever set as text.
 */
(function () {
  "use strict";

  const API = "/api/v1";
  const MAIN = "main"; // the chat shows the main instance
  const FINISHED = ["succeeded", "failed", "cancelled"];
  const config = document.getElementById("console-config");
  const conversation = document.getElementById("conversation");
  if (!config || !conversation || !window.EventSource) return;
  const cfg = JSON.parse(config.textContent);
  // Each followed run's feed, by run id: it outlives the next follow until its stream has ended
  // and its last record has replaced its last preview.
  const feeds = new Map();

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text) node.textContent = text;
    return node;
  }

  function notify(name, runId) {
    document.dispatchEvent(new CustomEvent(name, { detail: { runId } }));
  }

  /** Return the seqs of the run's answers in its block that its stream may have streamed. */
  function answersShown(feed) {
    const block = document.getElementById(`run-${feed.runId}`);
    if (!block || feed.base === null) return [];
    return [...block.querySelectorAll('.records > [data-kind="assistant"][data-seq]')]
      .map((node) => Number(node.dataset.seq))
      .filter((seq) => seq > feed.base);
  }

  /** True when the run panel shows this run past `queued`: its streamed text may be seen. */
  function statusCaughtUp(feed) {
    const summary = document.getElementById("live-summary");
    return Boolean(summary) && summary.dataset.runId === String(feed.runId) && summary.dataset.status !== "queued";
  }

  function newView() {
    const root = element("div", "live-answer");
    root.dataset.liveAnswer = "";
    root.hidden = true;
    const thinking = element("details", "thinking live-thinking");
    thinking.hidden = true;
    thinking.append(element("summary", "", "Thinking"), element("pre"));
    const tools = element("p", "live-tools quiet");
    tools.hidden = true;
    const answer = element("div", "msg answer live");
    answer.append(element("div", "who", "Agent"), element("div", "text"));
    answer.hidden = true;
    root.append(thinking, tools, answer);
    return { root, reasoning: thinking.querySelector("pre"), thinking, tools, answer, text: answer.querySelector(".text") };
  }

  /** Add to `node` what `text` has beyond what it shows (streamed text only ever grows). */
  function extend(node, text) {
    const shown = node.textContent.length;
    if (text.length > shown) node.append(text.slice(shown));
  }

  /** Put the call's text in its preview, made at the end of the run's records when first needed. */
  function render(feed, call, visible) {
    if (!call.content && !call.reasoning && !call.tools.length && !call.compacting) return;
    if (!call.view) {
      const records = document.querySelector(`#run-${feed.runId} .records`);
      if (!records) return;
      call.view = newView();
      records.append(call.view.root);
    }
    const view = call.view;
    if (call.reasoning) {
      view.thinking.hidden = false;
      extend(view.reasoning, call.reasoning);
    }
    const note = call.tools.length ? `Calling ${call.tools.join(", ")}…` : call.compacting ? "Compacting the context…" : "";
    // Set only when it changes: each change wakes the page's observer, which renders again.
    if (note && view.tools.textContent !== note) {
      view.tools.hidden = false;
      view.tools.textContent = note;
    }
    if (call.content) {
      view.answer.hidden = false;
      extend(view.text, call.content);
    }
    if (visible) view.root.hidden = false;
  }

  function drop(call) {
    if (call.view) call.view.root.remove();
    call.view = null;
    call.replaced = true;
  }

  /**
   * Match the run's answering calls, in order, with its answers (announced by the stream or in
   * its block), and bring the previews in line: replaced once the answer is in the block, gone
   * when the stream ended without an answer for them, otherwise grown.
   */
  function reconcile(feed) {
    const shown = answersShown(feed);
    const answers = [...new Set([...feed.announced, ...shown])].sort((a, b) => a - b);
    const visible = statusCaughtUp(feed);
    feed.calls.forEach((call, index) => {
      const seq = index < answers.length ? answers[index] : null;
      if (call.replaced) return;
      if ((seq !== null && shown.includes(seq)) || (seq === null && feed.finished)) drop(call);
      else render(feed, call, visible);
    });
    if (feed.finished && feed.calls.every((call) => call.replaced)) feeds.delete(feed.runId);
  }

  function openCall(feed) {
    if (!feed.open) {
      feed.open = { content: "", reasoning: "", tools: [], compacting: false, view: null, replaced: false };
      feed.calls.push(feed.open);
    }
    return feed.open;
  }

  function grow(feed, data) {
    if (data.instance !== MAIN) return;
    const call = openCall(feed);
    // A summary call's text is the context being compacted, never the answer: it is not shown.
    if (data.purpose && data.purpose !== "action") {
      call.compacting = true;
      return;
    }
    call.reasoning += data.reasoning || "";
    call.content += data.content || "";
    call.tools.push(...(data.tool_calls || []));
  }

  function callEnded(feed, data) {
    if (data.instance !== MAIN) return;
    const call = openCall(feed); // a call that streamed nothing still answers in its turn
    feed.open = null;
    if (data.purpose === "action" && !data.failed) return;
    drop(call);
    feed.calls.splice(feed.calls.indexOf(call), 1);
  }

  function follow(runId) {
    const known = feeds.get(runId);
    if (known && !known.finished) return; // the same run: its stream and its text go on
    if (known) known.calls.forEach(drop);
    const feed = { runId, base: null, calls: [], open: null, announced: new Set(), finished: false };
    feeds.set(runId, feed);
    const source = new EventSource(`${API}/runs/${runId}/events`);
    function on(name, handle) {
      source.addEventListener(name, (event) => {
        const data = JSON.parse(event.data);
        // Records after the first event's seq are this stream's; a record's id is its own seq.
        if (feed.base === null) feed.base = (Number(event.lastEventId.split(":")[0]) || 0) - (name === "record" ? 1 : 0);
        handle(data);
      });
    }
    on("delta", (data) => {
      const follows = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
      grow(feed, data);
      reconcile(feed);
      const view = feed.open && feed.open.view;
      if (!view) return;
      if (view.root.hidden) notify("agentloom:streaming", runId); // the panel is behind
      else if (follows) view.root.scrollIntoView({ block: "nearest" });
    });
    on("call_end", (data) => {
      callEnded(feed, data);
      reconcile(feed);
    });
    on("record", (data) => {
      if (data.instance !== MAIN || data.kind !== "assistant") return;
      feed.announced.add(data.seq);
      reconcile(feed);
      notify("agentloom:records", runId); // fetch the record that replaces the preview
    });
    on("status", (data) => {
      if (!FINISHED.includes(data.status)) return;
      source.close();
      feed.finished = true;
      reconcile(feed);
      notify("agentloom:records", runId);
    });
  }

  // Records put in a run's block, and a refreshed run panel, may each settle a preview.
  new MutationObserver(() => feeds.forEach(reconcile)).observe(conversation, { childList: true, subtree: true });
  document.addEventListener("agentloom:state", () => feeds.forEach(reconcile));
  document.addEventListener("agentloom:follow", (event) => follow(event.detail.runId));
  if (cfg.activeRun) follow(cfg.activeRun);
})();
