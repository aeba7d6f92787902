/*
 * The model page: "Fetch available models" asks POST /api/models/discover for the provider's
 * models (no page reload), picking one fills the window fields and the source badge, and editing
 * a window value by hand switches the source to manual.
 *
 * Model IDs come from the provider: they are only ever set as text, never as HTML.
 */
"use strict";

(function () {
  const WINDOW_VALUES = ["context_window", "max_output_tokens", "max_output_cap"];
  const NOTES = {
    provider: "from the provider's model list",
    provider_loaded: "the context length the local server reports the model loaded with",
    provider_maximum: "the model's MAXIMUM: not loaded now, the server may load it smaller",
    num_ctx: "sent as num_ctx with every request, so the server runs with it",
    server_props: "the context the server reports it was started with",
    learned: "learned from the server's refusal of a longer request (see below)",
    official_manifest: "from the official model manifest",
    platform_default: "32K platform fallback: check it against the provider's documentation",
    manual: "entered by an administrator",
    "": "not set yet: filled in on save from the manifest or the 32K fallback",
  };
  // How the fetched list names where a model's window came from (models.py WindowSource).
  const SOURCE_LABELS = {
    provider: "from the provider",
    provider_loaded: "as loaded by the server",
    provider_maximum: "model maximum, not loaded",
    num_ctx: "num_ctx",
    server_props: "from the server's properties",
    learned: "learned from the server",
    official_manifest: "official manifest",
    platform_default: "32K fallback: check it",
    manual: "manual",
  };
  // Providers that list their models only for a key (KEY_REQUIRED in
  // models_app/services/connections.py).
  const KEY_REQUIRED = ["openai", "deepseek"];
  const BASE_URL_HINTS = {
    openai: "blank: https://api.openai.com/v1",
    deepseek: "blank: https://api.deepseek.com",
    openai_compatible: "required, e.g. https://llm.example.com/v1",
    ollama: "required, the server root, e.g. http://127.0.0.1:11434",
    lmstudio: "required, the server root, e.g. http://127.0.0.1:1234",
    local: "not used by the local demo model",
  };
  const FIELD_LABELS = {
    provider: "Provider",
    base_url: "Base URL",
    api_key: "API key",
    resource_id: "Connection",
    model_id: "Model",
  };

  function byId(id) {
    return document.getElementById(id);
  }

  function csrfToken() {
    const cookie = document.cookie
      .split(";")
      .map((part) => part.trim())
      .find((part) => part.startsWith("csrftoken="));
    if (cookie) {
      return decodeURIComponent(cookie.slice("csrftoken=".length));
    }
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function errorText(data, status) {
    if (data && typeof data.detail === "string") {
      return data.detail;
    }
    if (data && typeof data === "object") {
      const parts = Object.entries(data).map(([field, messages]) => {
        const text = Array.isArray(messages) ? messages.join(" ") : String(messages);
        return `${FIELD_LABELS[field] || field}: ${text}`;
      });
      if (parts.length) {
        return parts.join(" ");
      }
    }
    return `The request failed (HTTP ${status}).`;
  }

  function formatTokens(value) {
    return value === null || value === undefined ? "unknown" : Number(value).toLocaleString("en");
  }

  function init() {
    const container = byId("model-discovery");
    if (!container) {
      return;
    }
    const button = byId("fetch-models");
    const status = byId("discover-status");
    const list = byId("discovered-models");
    const field = (name) => byId(`id_${name}`);
    const models = new Map();

    function setStatus(text, kind) {
      status.textContent = text;
      status.dataset.kind = kind || "";
    }

    function showBadge() {
      const source = field("window_source").value;
      const badge = byId("window-source-badge");
      badge.dataset.source = source;
      badge.textContent = source || "not set";
      byId("window-source-note").textContent = NOTES[source] || "";
      const linkSlot = byId("window-source-link");
      linkSlot.replaceChildren();
      const url = field("source_url").value.trim();
      if (/^https?:\/\//i.test(url)) {
        const link = document.createElement("a");
        link.href = url;
        link.target = "_blank";
        link.rel = "noopener noreferrer";
        link.textContent = "source";
        linkSlot.append(link);
      }
      const verified = field("verified_on").value.trim();
      byId("window-verified").textContent = verified ? `verified ${verified}` : "";
    }

    function showBudget() {
      const target = byId("effective-budget");
      if (!target) {
        return;
      }
      const [window, output, margin] = ["context_window", "max_output_tokens", "safety_margin_tokens"]
        .map((name) => field(name).value.trim());
      if (!window || !output) {
        target.textContent = "computed on save";
        return;
      }
      const budget = Number(window) - Number(output) - Number(margin || 1024);
      target.textContent = Number.isFinite(budget) ? `${budget.toLocaleString("en")} tokens` : "";
      target.dataset.invalid = budget > 0 ? "" : "true";
    }

    function showProviderHints() {
      const provider = field("provider").value;
      field("base_url").placeholder = BASE_URL_HINTS[provider] || "";
      const key = field("api_key");
      key.placeholder = container.dataset.hasApiKey === "true" ? "•••• stored key kept" : "";
      key.disabled = provider === "local";
      field("base_url").disabled = provider === "local";
    }

    function showModels(found) {
      models.clear();
      list.replaceChildren();
      let chat = 0;
      for (const model of found) {
        models.set(model.id, model);
        const option = document.createElement("option");
        option.value = model.id;
        const source = SOURCE_LABELS[model.window_source] || model.window_source;
        let text = `${model.id} — ${formatTokens(model.context_window)} tokens (${source})`;
        if (model.demo) {
          text += " · demo model, not a real LLM";
        }
        if (!model.chat) {
          text += " · not a chat model";
          option.disabled = true;
        } else {
          chat += 1;
        }
        option.textContent = text;
        list.append(option);
      }
      list.hidden = found.length === 0;
      if (found.length === 0) {
        setStatus("The provider lists no models.", "error");
        return;
      }
      setStatus(
        `${found.length} model${found.length === 1 ? "" : "s"} (${chat} chat). Pick one.`,
        "ok",
      );
      const current = field("model_id").value.trim();
      if (current && models.has(current) && models.get(current).chat) {
        list.value = current;
      }
    }

    async function fetchModels() {
      const body = {
        provider: field("provider").value,
        base_url: field("base_url").value.trim(),
        api_key: field("api_key").value.trim(),
      };
      if (container.dataset.resourceId) {
        body.resource_id = Number(container.dataset.resourceId);
      }
      const storedKey = container.dataset.hasApiKey === "true";
      if (!body.api_key && !storedKey && KEY_REQUIRED.includes(body.provider)) {
        setStatus("Enter the API key first: this provider lists its models only for a key.", "error");
        field("api_key").focus();
        return;
      }
      button.disabled = true;
      setStatus("Fetching models…", "busy");
      try {
        const response = await fetch(container.dataset.discoverUrl, {
          method: "POST",
          credentials: "same-origin",
          headers: {
            "Content-Type": "application/json",
            Accept: "application/json",
            "X-CSRFToken": csrfToken(),
          },
          body: JSON.stringify(body),
        });
        const data = await response.json().catch(() => null);
        if (!response.ok) {
          setStatus(errorText(data, response.status), "error");
          return;
        }
        showModels(data.models || []);
      } catch (error) {
        setStatus("The request did not reach the server; try again.", "error");
      } finally {
        button.disabled = false;
      }
    }

    function pick() {
      const model = models.get(list.value);
      if (!model || !model.chat) {
        return;
      }
      field("model_id").value = model.id;
      field("context_window").value = model.context_window;
      field("max_output_tokens").value = model.max_output_tokens;
      field("max_output_cap").value = model.max_output_cap ?? "";
      field("window_source").value = model.window_source;
      field("source_url").value = model.source_url || "";
      field("verified_on").value = model.verified_on || "";
      if (model.estimator === "server" && field("estimator") && !field("estimator").value) {
        // The server counts with its own tokenizer: measure with it.
        field("estimator").value = "server";
      }
      showBadge();
      showBudget();
      if (model.warning) {
        setStatus(`Picked ${model.id}. ${model.warning}`, "warning");
      } else {
        setStatus(`Picked ${model.id}.`, "ok");
      }
    }

    function markManual() {
      // Values typed by hand are vouched for by nobody but the administrator.
      if (field("window_source").value !== "manual") {
        field("window_source").value = "manual";
        field("source_url").value = "";
        field("verified_on").value = "";
      }
      showBadge();
    }

    // "Test connection": one tiny chat request with what the form holds now, nothing saved.
    const testButton = byId("test-connection");
    const testStatus = byId("test-status");
    function setTestStatus(text, kind) {
      testStatus.textContent = text;
      testStatus.dataset.kind = kind || "";
    }

    async function testConnection() {
      const body = {
        provider: field("provider").value,
        base_url: field("base_url").value.trim(),
        api_key: field("api_key").value.trim(),
        model_id: field("model_id").value.trim(),
      };
      if (container.dataset.resourceId) {
        body.resource_id = Number(container.dataset.resourceId);
      }
      testButton.disabled = true;
      setTestStatus("Sending one short request…", "busy");
      try {
        const response = await fetch(testButton.parentElement.dataset.testUrl, {
          method: "POST",
          credentials: "same-origin",
          headers: {
            "Content-Type": "application/json",
            Accept: "application/json",
            "X-CSRFToken": csrfToken(),
          },
          body: JSON.stringify(body),
        });
        const data = await response.json().catch(() => null);
        if (!response.ok) {
          setTestStatus(errorText(data, response.status), "error");
        } else if (data.ok) {
          const model = data.model ? ` (${data.model})` : "";
          const counts = data.tokenizer
            ? ` The server counts tokens with its own tokenizer (${data.tokenizer}): the estimator is set to it.`
            : "";
          if (data.estimator === "server" && field("estimator") && !field("estimator").value) {
            field("estimator").value = "server";
          }
          setTestStatus(`Connected: the model answered in ${Number(data.latency_ms).toLocaleString("en")} ms${model}.${counts}`, "ok");
        } else {
          setTestStatus(`Not connected after ${Number(data.latency_ms).toLocaleString("en")} ms: ${data.detail}`, "error");
        }
      } catch (error) {
        setTestStatus("The request did not reach the server; try again.", "error");
      } finally {
        testButton.disabled = false;
      }
    }

    testButton.addEventListener("click", testConnection);
    button.addEventListener("click", fetchModels);
    list.addEventListener("change", pick);
    for (const name of WINDOW_VALUES) {
      field(name).addEventListener("input", markManual);
    }
    for (const name of [...WINDOW_VALUES, "safety_margin_tokens"]) {
      field(name).addEventListener("input", showBudget);
    }
    field("window_source").addEventListener("change", showBadge);
    field("source_url").addEventListener("input", showBadge);
    field("verified_on").addEventListener("change", showBadge);
    field("provider").addEventListener("change", () => {
      // A list fetched for another provider would offer models this one does not serve.
      models.clear();
      list.replaceChildren();
      list.hidden = true;
      setStatus("", "");
      showProviderHints();
    });
    showProviderHints();
    showBadge();
    showBudget();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
