/*
 * AgentLoom console: the answer of a running model call as it is generated.
 *
 * It follows `GET /api/v1/runs/{id}/events` (server-sent events) for the run the chat follows
 * (the `agentloom:follow` event of console.js, or the page's active run): `delta` events grow a
 * preview at the end of the run's block — the answer as plain text, reasoning in a folded
 * "Thinking" block, tool calls as they are decided; a `record` event asks console.js for the
 * server-rendered record, which replaces the preview once it is on the page; the stream is
 * closed when a `status` event says the run has finished. Text is only ever set as text.
 */
(function () {
  "use strict";

  const API = "/api/v1";
  const FINISHED = ["succeeded", "failed", "cancelled"];
  const config = document.getElementById("console-config");
  const conversation = document.getElementById("conversation");
  if (!config || !conversation || !window.EventSource) return;
  const cfg = JSON.parse(config.textContent);
  let source = null;
  let runId = null;
  let live = null;
  let waitingFor = null;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text) node.textContent = text;
    return node;
  }

  /** Return the preview of the call in flight, made at the end of the run's records. */
  function preview() {
    if (live && live.root.isConnected) return live;
    const records = document.querySelector(`#run-${runId} .records`);
    if (!records) return null;
    const root = element("div", "live-answer");
    root.dataset.liveAnswer = "";
    const thinking = element("details", "thinking live-thinking");
    thinking.hidden = true;
    thinking.append(element("summary", "", "Thinking"), element("pre"));
    const tools = element("p", "live-tools quiet");
    tools.hidden = true;
    const answer = element("div", "msg answer live");
    answer.append(element("div", "who", "Agent"), element("div", "text"));
    answer.hidden = true;
    root.append(thinking, tools, answer);
    records.append(root);
    live = { root, thinking, tools, answer, names: [] };
    return live;
  }

  function clear() {
    if (live) live.root.remove();
    live = null;
    waitingFor = null;
  }

  function showDelta(data) {
    if (data.instance !== "main") return; // the chat shows the main instance
    if (waitingFor !== null) clear(); // a new call began before the last record was shown
    const view = preview();
    if (!view) return;
    if (data.reasoning) {
      view.thinking.hidden = false;
      view.thinking.querySelector("pre").textContent += data.reasoning;
    }
    if (data.tool_calls && data.tool_calls.length) {
      view.names.push(...data.tool_calls);
      view.tools.hidden = false;
      view.tools.textContent = `Calling ${view.names.join(", ")}…`;
    }
    if (data.content) {
      view.answer.hidden = false;
      view.answer.querySelector(".text").textContent += data.content;
    }
    const follow = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
    if (follow) view.root.scrollIntoView({ block: "nearest" });
  }

  /** Keep the preview until the record that replaces it is on the page. */
  function recordLanded(data) {
    if (data.instance !== "main" || data.kind !== "assistant" || !live) return;
    waitingFor = data.seq;
    document.dispatchEvent(new CustomEvent("agentloom:records", { detail: { runId } }));
  }

  new MutationObserver(() => {
    if (waitingFor === null || !live) return;
    if (conversation.querySelector(`[data-seq="${waitingFor}"]`)) clear();
  }).observe(conversation, { childList: true, subtree: true });

  function follow(id) {
    if (source) source.close();
    clear();
    runId = id;
    source = new EventSource(`${API}/runs/${id}/events`);
    source.addEventListener("delta", (event) => showDelta(JSON.parse(event.data)));
    source.addEventListener("record", (event) => recordLanded(JSON.parse(event.data)));
    source.addEventListener("status", (event) => {
      const data = JSON.parse(event.data);
      if (!FINISHED.includes(data.status)) return;
      source.close();
      source = null;
      // A call stopped by a cancel or a failure journals nothing: its preview goes.
      if (waitingFor === null) clear();
      else setTimeout(clear, 2000);
      document.dispatchEvent(new CustomEvent("agentloom:records", { detail: { runId } }));
    });
  }

  document.addEventListener("agentloom:follow", (event) => follow(event.detail.runId));
  if (cfg.activeRun) follow(cfg.activeRun);
})();
